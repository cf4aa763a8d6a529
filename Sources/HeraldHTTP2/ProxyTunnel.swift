import FoundationEssentials

/// An HTTP CONNECT tunnel through a proxy (`http://[user:password@]host:port`).
struct ProxyTunnel {
    let host: String
    let port: Int
    /// The CONNECT request, with Basic credentials when the URL has them.
    let request: [UInt8]

    init?(_ url: String, to authority: String) {
        var rest = Substring(url)
        if let scheme = rest.firstRange(of: "://") {
            guard rest[..<scheme.lowerBound].lowercased() == "http" else { return nil }
            rest = rest[scheme.upperBound...]
        }
        var credentials: String? = nil
        if let at = rest.lastIndex(of: "@") {
            credentials = Self.percentDecoded(rest[..<at])
            rest = rest[rest.index(after: at)...]
        }
        // 1080 is libcurl's default proxy port.
        guard let (host, port) = HTTP2ClientConfiguration.hostAndPort(rest, defaultPort: 1080) else { return nil }
        self.host = host
        self.port = port
        var text = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
        if let credentials {
            text += "Proxy-Authorization: Basic \(Data(credentials.utf8).base64EncodedString())\r\n"
        }
        text += "\r\n"
        request = Array(text.utf8)
    }

    /// `user%40corp:p%3Ass` → `user@corp:p:ss` (as libcurl reads proxy credentials).
    static func percentDecoded(_ text: Substring) -> String {
        var out: [UInt8] = []
        var bytes = Array(text.utf8)[...]
        while let b = bytes.popFirst() {
            if b == UInt8(ascii: "%"), bytes.count >= 2,
               let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) {
                out.append(v)
                bytes = bytes.dropFirst(2)
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The error for a proxy URL the nghttp2 engine cannot use.
    static func unsupported(_ url: String) -> String {
        "the nghttp2 engine supports HTTP CONNECT proxies given as http://[user:password@]host:port, not \"\(HTTP2ClientConfiguration.redactedProxy(url))\"; "
            + "use \"engine\": \"curl\" for other proxies"
    }

    /// The length of an HTTP head ending in an empty line, if `bytes` holds all of it.
    static func headEnd(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 3..<bytes.count where bytes[i] == 10 && bytes[i - 1] == 13 && bytes[i - 2] == 10 && bytes[i - 3] == 13 {
            return i + 1
        }
        return nil
    }
}
