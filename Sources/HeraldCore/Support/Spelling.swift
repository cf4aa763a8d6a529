/// "Did you mean …?" suggestions for misspelt keys, options and names.
public enum Spelling {
    /// The candidate closest to `word` (case-insensitive edit distance), when close enough to be
    /// a likely typo.
    public static func closest<S: Sequence<String>>(to word: String, in candidates: S) -> String? {
        let lower = word.lowercased()
        var best: (String, Int)? = nil
        for candidate in candidates {
            let d = distance(lower, candidate.lowercased())
            if d <= max(2, word.count / 4), d < (best?.1 ?? .max) { best = (candidate, d) }
        }
        return best?.0
    }

    /// Levenshtein distance.
    public static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = previous
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
