import FoundationEssentials
import HeraldCore

/// The push services a `webpush` route may send to (`allowedEndpoints`): host globs, as
/// Sygnal's `allowed_endpoints`, checked when a subscription is registered so the gateway can
/// never be pointed at an arbitrary host (SSRF).
///
/// An entry is a host name where `*` stands for any run of characters (dots included) and `?`
/// for one, optionally with `:port` (any port when left out); case does not matter. Loopback
/// (`localhost`, `*.localhost`, `127.0.0.0/8`, `::1`) and other IP literals match only an entry that
/// names them exactly, without wildcards: `"*"` admits every public name but never `127.0.0.1`.
public struct EndpointAllowList: Sendable, Equatable, CustomStringConvertible {
    /// The browsers' push services: Chrome, Edge and Opera (FCM), Firefox (Mozilla), Windows
    /// (WNS), Safari (Apple).
    public static let browserDefaults = ["fcm.googleapis.com", "updates.push.services.mozilla.com", "*.notify.windows.com",
                                         "web.push.apple.com", "*.push.apple.com"]

    struct Entry: Sendable, Equatable {
        var host: String
        var port: Int?
        var hasWildcard: Bool { host.contains("*") || host.contains("?") }
    }

    let entries: [Entry]
    /// The entries as configured.
    public let patterns: [String]

    /// - Throws: a message naming the first entry that is not a host glob.
    public init(_ patterns: [String]) throws(AllowListProblem) {
        var entries: [Entry] = []
        for (index, pattern) in patterns.enumerated() {
            guard let entry = Self.parse(pattern) else {
                throw AllowListProblem(index: index, message: "\"\(pattern)\" is not a host glob such as \"fcm.googleapis.com\", \"*.push.apple.com\" or \"127.0.0.1:8443\"")
            }
            entries.append(entry)
        }
        self.entries = entries
        self.patterns = patterns
    }

    /// Why an entry of `allowedEndpoints` is unusable.
    public struct AllowListProblem: Error, Sendable, Equatable {
        public var index: Int
        public var message: String
    }

    public var description: String { patterns.joined(separator: ", ") }

    /// Whether a push service at `host` (lower-case, IPv6 without brackets) and `port` may be used.
    public func allows(host: String, port: Int) -> Bool {
        let host = host.lowercased()
        let literal = Self.isLoopbackOrIPLiteral(host)
        return entries.contains { e in
            if let p = e.port, p != port { return false }
            if literal { return !e.hasWildcard && e.host == host }
            return Self.glob(Array(e.host.utf8), matches: Array(host.utf8))
        }
    }

    static func parse(_ pattern: String) -> Entry? {
        var text = Substring(pattern.lowercased())
        guard !text.isEmpty, !text.contains("/"), !text.contains("@"), !text.contains(where: \.isWhitespace) else { return nil }
        var port: Int? = nil
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (1...65535).contains(p) else { return nil }
                port = p
            }
            text = text[text.index(after: text.startIndex)..<close]
        } else if let colon = text.lastIndex(of: ":"), text.firstIndex(of: ":") == colon {
            guard let p = Int(text[text.index(after: colon)...]), (1...65535).contains(p) else { return nil }
            port = p
            text = text[..<colon]
        }
        guard !text.isEmpty, text.allSatisfy({ $0.isLetter || $0.isNumber || "-.*?:".contains($0) }) else { return nil }
        return Entry(host: String(text), port: port)
    }

    /// Loopback names and addresses, and any IP literal: only an exact entry admits them.
    static func isLoopbackOrIPLiteral(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isNumber) }
            || host.allSatisfy { $0.isNumber || $0 == "." }
    }

    /// Glob match over bytes: `*` any run, `?` one byte.
    static func glob(_ pattern: [UInt8], matches text: [UInt8]) -> Bool {
        var p = 0, t = 0, star = -1, mark = 0
        while t < text.count {
            if p < pattern.count, pattern[p] == UInt8(ascii: "?") || pattern[p] == text[t] {
                p += 1; t += 1
            } else if p < pattern.count, pattern[p] == UInt8(ascii: "*") {
                star = p; mark = t; p += 1
            } else if star >= 0 {
                p = star + 1; mark += 1; t = mark
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == UInt8(ascii: "*") { p += 1 }
        return p == pattern.count
    }
}
