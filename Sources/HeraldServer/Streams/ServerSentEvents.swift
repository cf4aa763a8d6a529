import HeraldCore

/// Server-Sent Events framing (HTML Standard, "Server-sent events"): UTF-8 lines ending in LF,
/// an event ends with an empty line.
enum ServerSentEvents {
    /// `id: <id>\nevent: <event>\ndata: <line>\n…\n\n`; a payload with line breaks (CR, LF or
    /// CRLF) becomes one `data:` line per line, as the standard's parser joins them with LF.
    static func event(id: Int64, name: String, data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + 48)
        out += Array("id: \(id)\nevent: \(name)\n".utf8)
        var line: [UInt8] = []
        var previousCR = false
        func flush() {
            out += Array("data: ".utf8)
            out += line
            out.append(0x0A)
            line.removeAll(keepingCapacity: true)
        }
        for b in data {
            if b == 0x0A && previousCR { previousCR = false; continue }
            previousCR = b == 0x0D
            if b == 0x0A || b == 0x0D { flush() } else { line.append(b) }
        }
        flush()
        out.append(0x0A)
        return out
    }

    /// A comment line (`: text\n\n`): ignored by clients, keeps proxies and dead-peer detection busy.
    static func comment(_ text: String) -> [UInt8] { Array(": \(text)\n\n".utf8) }

    /// `retry: <ms>\n\n`: how long a client waits before it reconnects.
    static func retry(milliseconds: Int) -> [UInt8] { Array("retry: \(milliseconds)\n\n".utf8) }

    /// The heartbeat comment.
    static let heartbeat = comment("heartbeat")
    /// The last bytes of every stream when the daemon stops.
    static let shutdown = comment("server shutting down")
}
