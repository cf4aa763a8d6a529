/// The client's last check of what it would put on the wire: a request whose method, `:path` or
/// a header (the caller's or one its hooks add) is not a valid HTTP/2 field (RFC 9113 §8.2.1,
/// §8.2.2, §8.3.1) is never sent.
///
/// Plugins check every value a caller gave when the notification is accepted, so this refusal
/// means a programming error upstream. It names the header and the offending byte, never the
/// value (which may be a credential).
enum HTTP2FieldCheck {
    /// What makes `request` unsendable, or `nil` when it is well formed.
    /// - Parameter sharedChecked: the request's ``HTTP2Request/headers`` were checked already
    ///   (the same list as an earlier request's: see ``SharedHeaders``).
    static func problem(_ request: HTTP2Request, sharedChecked: Bool = false) -> String? {
        if request.method != "POST" && request.method != "GET" && (request.method.isEmpty || !request.method.utf8.allSatisfy(isTokenByte)) {
            return "the method is not an HTTP token"
        }
        if let p = valueProblem(request.path) { return ":path: \(p)" }
        if !request.path.hasPrefix("/") && !(request.method == "OPTIONS" && request.path == "*") {
            return ":path: must start with \"/\""
        }
        if firstByte(of: request.path, where: { $0 == 0x20 || $0 == 0x09 }) != nil { return ":path: contains a space" }
        if !sharedChecked { for header in request.headers { if let p = problem(header) { return p } } }
        for header in request.ownHeaders { if let p = problem(header) { return p } }
        return nil
    }

    /// What makes `header` an invalid HTTP/2 field, or `nil`.
    static func problem(_ header: HTTP2Header) -> String? {
        let name = header.name
        if name.isEmpty { return "a header has an empty name" }
        if let b = firstByte(of: name, where: { $0 <= 0x20 || ($0 >= 0x41 && $0 <= 0x5A) || $0 >= 0x7F || $0 == 0x3A }) {
            return "a header name contains \(byteName(b)) (RFC 9113 §8.2.1)"
        }
        switch name {
        case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
            return "header \(name) is connection-specific, malformed in HTTP/2 (RFC 9113 §8.2.2)"
        case "te" where header.value != "trailers":
            return "header te is connection-specific, malformed in HTTP/2 but as \"trailers\" (RFC 9113 §8.2.2)"
        default:
            break
        }
        if let p = valueProblem(header.value) { return "header \(name): \(p)" }
        return nil
    }

    /// A field value's problem: NUL, LF or CR anywhere, or whitespace at either end (§8.2.1).
    static func valueProblem(_ value: String) -> String? {
        if let b = firstByte(of: value, where: { $0 == 0x00 || $0 == 0x0A || $0 == 0x0D }) {
            return "its value contains \(byteName(b)) (RFC 9113 §8.2.1)"
        }
        if let first = value.utf8.first, first == 0x20 || first == 0x09 { return "its value starts with whitespace (RFC 9113 §8.2.1)" }
        if let last = value.utf8.last, last == 0x20 || last == 0x09 { return "its value ends with whitespace (RFC 9113 §8.2.1)" }
        return nil
    }

    /// The first byte of `text`'s UTF-8 that `test` picks, scanned in place.
    @inline(__always)
    static func firstByte(of text: String, where test: (UInt8) -> Bool) -> UInt8? {
        // A native string's bytes are contiguous: scanned through a buffer, not the UTF-8 view.
        let scanned: Int? = text.utf8.withContiguousStorageIfAvailable { bytes in
            for b in bytes where test(b) { return Int(b) }
            return -1
        }
        if let scanned { return scanned < 0 ? nil : UInt8(scanned) }
        for b in text.utf8 where test(b) { return b }
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

/// Remembers the last header list that passed ``HTTP2FieldCheck``, so that the requests (or
/// attempts) sharing one list (one notification's, one provider token's) check it once.
///
/// Holding the list keeps its storage alive: another list with the same storage address is the
/// same, unchanged list (an array's storage is never written while it is shared).
struct SharedHeaders {
    private var checked: [HTTP2Header] = []

    /// Whether `headers` is the list that passed last time.
    func isChecked(_ headers: [HTTP2Header]) -> Bool {
        headers.withUnsafeBufferPointer { a in
            checked.withUnsafeBufferPointer { b in a.count == b.count && a.baseAddress == b.baseAddress && a.baseAddress != nil }
        }
    }

    /// `headers`' first problem, checking it only when it is not the list that passed last time.
    mutating func problem(_ headers: [HTTP2Header]) -> String? {
        if headers.isEmpty || isChecked(headers) { return nil }
        for header in headers { if let p = HTTP2FieldCheck.problem(header) { return p } }
        checked = headers
        return nil
    }
}
