/// The client's last check of what it would put on the wire: a request whose method, `:path` or
/// a header (the caller's or one its hooks add) is not a valid HTTP/2 field (RFC 9113 §8.2.1,
/// §8.2.2, §8.3.1) is never sent.
///
/// Plugins check every value a caller gave when the notification is accepted, so this refusal
/// means a programming error upstream. It names the header and the offending byte, never the
/// value (which may be a credential).
enum HTTP2FieldCheck {
    /// Headers that are connection-specific in HTTP/1.1 and malformed in HTTP/2 (§8.2.2).
    static let connectionSpecific: Set<String> = ["connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade"]

    /// What makes `request` unsendable, or `nil` when it is well formed.
    static func problem(_ request: HTTP2Request) -> String? {
        if request.method.isEmpty || !request.method.utf8.allSatisfy(isTokenByte) {
            return "the method is not an HTTP token"
        }
        if let p = valueProblem(request.path) { return ":path: \(p)" }
        if !request.path.hasPrefix("/") && !(request.method == "OPTIONS" && request.path == "*") {
            return ":path: must start with \"/\""
        }
        if request.path.utf8.contains(where: { $0 == 0x20 || $0 == 0x09 }) { return ":path: contains a space" }
        for header in request.headers { if let p = problem(header) { return p } }
        for header in request.ownHeaders { if let p = problem(header) { return p } }
        return nil
    }

    /// What makes `header` an invalid HTTP/2 field, or `nil`.
    static func problem(_ header: HTTP2Header) -> String? {
        let name = header.name
        if name.isEmpty { return "a header has an empty name" }
        for b in name.utf8 where b <= 0x20 || (b >= 0x41 && b <= 0x5A) || b >= 0x7F || b == 0x3A {
            return "a header name contains \(byteName(b)) (RFC 9113 §8.2.1)"
        }
        if connectionSpecific.contains(name) || (name == "te" && header.value != "trailers") {
            return "header \(name) is connection-specific, malformed in HTTP/2 (RFC 9113 §8.2.2)"
        }
        if let p = valueProblem(header.value) { return "header \(name): \(p)" }
        return nil
    }

    /// A field value's problem: NUL, LF or CR anywhere, or whitespace at either end (§8.2.1).
    static func valueProblem(_ value: String) -> String? {
        for b in value.utf8 where b == 0x00 || b == 0x0A || b == 0x0D {
            return "its value contains \(byteName(b)) (RFC 9113 §8.2.1)"
        }
        if let first = value.utf8.first, first == 0x20 || first == 0x09 { return "its value starts with whitespace (RFC 9113 §8.2.1)" }
        if let last = value.utf8.last, last == 0x20 || last == 0x09 { return "its value ends with whitespace (RFC 9113 §8.2.1)" }
        return nil
    }

    /// A byte of an HTTP token (RFC 9110 §5.6.2).
    static func isTokenByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(b)
    }

    static func byteName(_ b: UInt8) -> String {
        let hex = String(b, radix: 16, uppercase: true)
        let code = "0x" + (hex.count < 2 ? "0" : "") + hex
        switch b {
        case 0x00: return "NUL (\(code))"
        case 0x0A: return "LF (\(code))"
        case 0x0D: return "CR (\(code))"
        case 0x20: return "a space (\(code))"
        case 0x3A: return "a colon"
        case 0x41...0x5A: return "an upper-case letter"
        default: return "byte \(code)"
        }
    }
}
