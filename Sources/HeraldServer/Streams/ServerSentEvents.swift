import HeraldCore

/// Server-Sent Events framing (HTML Standard, "Server-sent events"): UTF-8 lines ending in LF,
/// an event ends with an empty line.
enum ServerSentEvents {
    /// `id: <id>\nevent: <event>\ndata: <line>\n…\n\n`; a payload with line breaks (CR, LF or
    /// CRLF) becomes one `data:` line per line, as the standard's parser joins them with LF.
    static func event(id: Int64, name: String, data: [UInt8]) -> [UInt8] {
        event(id: id, name: name, dataLines: dataLines(data))
    }

    /// ``event(id:name:data:)`` from the `data:` lines ``dataLines(_:)`` made: an event written to
    /// many streams is split into lines once.
    static func event(id: Int64, name: String, dataLines: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(dataLines.count + 40)
        out += "id: ".utf8
        out += String(id).utf8
        out += "\nevent: ".utf8
        out += name.utf8
        out.append(0x0A)
        out += dataLines
        return out
    }

    /// `data: <line>\n` for each line of `data` (CR, LF or CRLF ends a line), then the empty line
    /// that ends the event.
    static func dataLines(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(data.count + 8)
        var lineStart = true
        var previousCR = false
        for b in data {
            if b == 0x0A && previousCR { previousCR = false; continue }
            previousCR = b == 0x0D
            if lineStart { out += "data: ".utf8; lineStart = false }
            if b == 0x0A || b == 0x0D {
                out.append(0x0A)
                lineStart = true
            } else {
                out.append(b)
            }
        }
        if lineStart { out += "data: ".utf8 }
        out.append(0x0A)
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
