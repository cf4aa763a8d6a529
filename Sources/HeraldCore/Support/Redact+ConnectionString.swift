import FoundationEssentials

extension Redact {
    /// A database connection string without its password, for logs and errors:
    /// `postgresql://herald:secret@db/herald` → `postgresql://herald:***@db/herald`, and
    /// `host=db password=secret` → `host=db password=***`.
    public static func connectionString(_ s: String) -> String {
        var out = s
        if let scheme = out.firstRange(of: "://") {
            let rest = out[scheme.upperBound...]
            let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
            if let at = rest[..<authorityEnd].lastIndex(of: "@"),
               let colon = rest[..<at].firstIndex(of: ":") {
                out.replaceSubrange(out.index(after: colon)..<at, with: "***")
            }
        }
        // Key/value form and URI query parameters: password=… up to a space or '&'.
        var result = ""
        var i = out.startIndex
        while i < out.endIndex {
            if out[i...].hasPrefix("password="), i == out.startIndex || " &?".contains(out[out.index(before: i)]) {
                result += "password=***"
                i = out.index(i, offsetBy: "password=".count)
                if i < out.endIndex, out[i] == "'" {
                    i = out.index(after: i)
                    while i < out.endIndex, out[i] != "'" { i = out.index(after: i) }
                    if i < out.endIndex { i = out.index(after: i) }
                } else {
                    while i < out.endIndex, !" &".contains(out[i]) { i = out.index(after: i) }
                }
                continue
            }
            result.append(out[i])
            i = out.index(after: i)
        }
        return result
    }
}
