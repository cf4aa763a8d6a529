import Foundation

/// Reads one HTTP/1.1 response from the bytes of a connection, as they arrive: the head (status
/// line and headers), then the body's pieces, un-chunked (`Transfer-Encoding: chunked`), cut at
/// `Content-Length`, or up to the end of the connection. A pure state machine (no I/O), used by
/// the socket transport of the event stream (``SocketStreamConnection``).
///
/// - Important: a client for Herald's stream, not a general HTTP client: no compression, no
///   redirects, no trailers kept (they are read and dropped), `1xx` answers skipped.
struct HTTPResponseReader: Sendable {
    /// What a read completed.
    enum Output: Sendable, Equatable {
        case head(status: Int, headers: [String: String])
        case body(Data)
        /// The response ended cleanly (the last chunk, or `Content-Length` bytes read).
        case end
    }

    /// Why the bytes are not an HTTP/1.1 response (or the connection ended inside one).
    struct Malformed: Error, Sendable, Equatable, CustomStringConvertible {
        var description: String
    }

    /// The longest head accepted.
    static let maxHeadBytes = 65_536
    /// The longest chunk-size line accepted (hex digits and extensions).
    static let maxLineBytes = 4096

    private enum Phase: Equatable {
        case head
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case length(remaining: Int)
        case untilClose
        case done
    }

    private var phase = Phase.head
    private var buffer: [UInt8] = []

    /// Whether the response has ended (nothing after it is read).
    var isDone: Bool { phase == .done }

    /// Feeds bytes read from the connection.
    /// - Throws: ``Malformed`` when they cannot be a response.
    mutating func feed(_ bytes: some Collection<UInt8>) throws(Malformed) -> [Output] {
        guard phase != .done else { return [] }
        buffer.append(contentsOf: bytes)
        var out: [Output] = []
        var position = 0
        defer { buffer.removeFirst(position) }
        while position < buffer.count, phase != .done {
            switch phase {
            case .head:
                guard let end = Self.find([13, 10, 13, 10], in: buffer, from: position) else {
                    if buffer.count - position > Self.maxHeadBytes { throw Malformed(description: "the response head is over \(Self.maxHeadBytes) bytes") }
                    return out
                }
                let (status, headers) = try Self.parseHead(buffer[position..<end])
                position = end + 4
                if (100..<200).contains(status) && status != 101 { continue }   // 100 Continue and friends
                out.append(.head(status: status, headers: headers))
                if (headers["transfer-encoding"] ?? "").lowercased().split(separator: ",").last?.trimmingCharacters(in: .whitespaces) == "chunked" {
                    phase = .chunkSize
                } else if let length = headers["content-length"] {
                    guard let n = Int(length.trimmingCharacters(in: .whitespaces)), n >= 0 else {
                        throw Malformed(description: "Content-Length is not a number: \(length.prefix(40))")
                    }
                    phase = n == 0 ? .done : .length(remaining: n)
                } else if status == 204 || status == 304 {
                    phase = .done
                } else {
                    phase = .untilClose
                }
                if phase == .done { out.append(.end) }
            case .chunkSize:
                guard let end = Self.find([13, 10], in: buffer, from: position) else {
                    if buffer.count - position > Self.maxLineBytes { throw Malformed(description: "a chunk-size line is over \(Self.maxLineBytes) bytes") }
                    return out
                }
                let line = String(decoding: buffer[position..<end], as: UTF8.self)
                let digits = line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0].trimmingCharacters(in: .whitespaces)
                guard !digits.isEmpty, digits.count <= 15, let size = Int(digits, radix: 16) else {
                    throw Malformed(description: "bad chunk size \"\(line.prefix(40))\"")
                }
                position = end + 2
                phase = size == 0 ? .trailers : .chunkData(remaining: size)
            case .chunkData(let remaining):
                let take = min(remaining, buffer.count - position)
                out.append(.body(Data(buffer[position..<position + take])))
                position += take
                phase = remaining == take ? .chunkDataEnd : .chunkData(remaining: remaining - take)
            case .chunkDataEnd:
                guard buffer.count - position >= 2 else { return out }
                guard buffer[position] == 13, buffer[position + 1] == 10 else { throw Malformed(description: "a chunk does not end with CRLF") }
                position += 2
                phase = .chunkSize
            case .trailers:
                guard let end = Self.find([13, 10], in: buffer, from: position) else {
                    if buffer.count - position > Self.maxHeadBytes { throw Malformed(description: "the trailers are over \(Self.maxHeadBytes) bytes") }
                    return out
                }
                let empty = end == position
                position = end + 2
                if empty {
                    phase = .done
                    out.append(.end)
                }
            case .length(let remaining):
                let take = min(remaining, buffer.count - position)
                out.append(.body(Data(buffer[position..<position + take])))
                position += take
                if remaining == take {
                    phase = .done
                    out.append(.end)
                } else {
                    phase = .length(remaining: remaining - take)
                }
            case .untilClose:
                out.append(.body(Data(buffer[position...])))
                position = buffer.count
            case .done:
                break
            }
        }
        return out
    }

    /// The connection ended (the peer closed it).
    /// - Throws: ``Malformed`` when it ended inside the head or a framed body.
    mutating func finish() throws(Malformed) -> [Output] {
        switch phase {
        case .done:
            return []
        case .untilClose:
            phase = .done
            return [.end]
        case .head:
            throw Malformed(description: buffer.isEmpty ? "the server closed the connection without answering" : "the connection ended inside the response head")
        default:
            throw Malformed(description: "the connection was lost (it ended inside the response body)")
        }
    }

    /// The status and the headers (names lower-cased; repeated ones joined with ", ").
    private static func parseHead(_ bytes: ArraySlice<UInt8>) throws(Malformed) -> (Int, [String: String]) {
        let text = String(decoding: bytes, as: UTF8.self)
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)[...]
        let statusLine = lines.popFirst() ?? ""
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), parts[1].count == 3, let status = Int(parts[1]) else {
            throw Malformed(description: "not an HTTP/1.x status line: \"\(statusLine.prefix(60))\"")
        }
        var headers: [String: String] = [:]
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw Malformed(description: "a header line without a colon: \"\(line.prefix(60))\"") }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if let previous = headers[name] { headers[name] = previous + ", " + value } else { headers[name] = value }
        }
        return (status, headers)
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard haystack.count - start >= needle.count else { return nil }
        var i = start
        let last = haystack.count - needle.count
        while i <= last {
            if haystack[i] == needle[0] {
                var match = true
                for k in 1..<needle.count where haystack[i + k] != needle[k] { match = false; break }
                if match { return i }
            }
            i += 1
        }
        return nil
    }
}
