import Foundation
import HeraldCore
import HeraldTestKit
#if canImport(Glibc)
import Glibc
#endif

/// A minimal HTTP/1.1 client over a real socket, for tests: one request per connection.
struct HTTPTestClient {
    struct Response: CustomStringConvertible {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        var json: JSONValue? { try? JSONValue.parse(Data(body)) }
        /// `error.field` of an error answer.
        var errorField: String? { json?["error"]?["field"]?.stringValue }
        var errorCode: String? { json?["error"]?["code"]?.stringValue }
        var description: String { "\(status) \(text)" }
    }

    struct Failure: Error, CustomStringConvertible { var description: String }

    let port: Int
    var key: String?

    init(port: Int, key: String? = nil) {
        self.port = port
        self.key = key
    }

    func get(_ path: String) async throws -> Response { try await request("GET", path) }
    func delete(_ path: String) async throws -> Response { try await request("DELETE", path) }
    func post(_ path: String, _ json: String, contentType: String? = "application/json") async throws -> Response {
        try await request("POST", path, body: Array(json.utf8), contentType: contentType)
    }

    /// Sends a request on a thread of its own: blocking I/O must not hold one of the few
    /// threads the daemon under test needs for its own tasks.
    func request(_ method: String, _ path: String, body: [UInt8] = [], contentType: String? = nil,
                 headers: [String: String] = [:]) async throws -> Response {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Response, any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result { try blockingRequest(method, path, body: body, contentType: contentType, headers: headers) })
            }
        }
    }

    func blockingRequest(_ method: String, _ path: String, body: [UInt8] = [], contentType: String? = nil,
                         headers: [String: String] = [:]) throws -> Response {
        let fd = try Loopback.connect(port: port)
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        if let key { head += "Authorization: Bearer \(key)\r\n" }
        if let contentType { head += "Content-Type: \(contentType)\r\n" }
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        // Never with Transfer-Encoding: a request with both is refused (RFC 9112 section 6.3).
        let chunked = headers.keys.contains { $0.lowercased() == "transfer-encoding" }
        if (!body.isEmpty || method == "POST") && !chunked { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        let out = Array(head.utf8) + body
        var sent = 0
        while sent < out.count {
            let n = out[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }  // the server may answer (413) and close before reading everything
            sent += n
        }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            data += buffer[0..<n]
        }
        return try Self.parse(data)
    }

    static func parse(_ data: [UInt8]) throws -> Response {
        let text = String(decoding: data, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw Failure(description: "no HTTP response: \(text.prefix(200))") }
        let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { throw Failure(description: "bad status line \(lines[0])") }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            if let colon = line.firstIndex(of: ":") {
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        let bodyStart = text.utf8.distance(from: text.utf8.startIndex, to: split.upperBound.samePosition(in: text.utf8)!)
        var body = Array(data[bodyStart...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" { body = dechunk(body) }   // Synapse answers chunked
        return Response(status: status, headers: headers, body: body)
    }

    /// The data of a chunked body (sizes in hex, each chunk followed by CRLF; a 0 chunk ends it).
    static func dechunk(_ raw: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [], i = 0
        while let lineEnd = raw[i...].firstIndex(of: 0x0D), lineEnd + 1 < raw.count {
            let sizeText = String(decoding: raw[i..<lineEnd], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size > 0 else { break }
            let start = lineEnd + 2
            guard start + size <= raw.count else { break }
            out += raw[start..<start + size]
            i = start + size + 2
            if i >= raw.count { break }
        }
        return out
    }
}
