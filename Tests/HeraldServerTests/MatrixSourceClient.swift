import Foundation
import HeraldCore
import HeraldMatrix
#if canImport(Glibc)
import Glibc
#endif

/// HTTP/1.1 requests from a chosen loopback address (`127.0.0.2`, …: all of 127/8 is local on
/// Linux) over one keep-alive connection: what the Matrix tests use to be "another homeserver"
/// or "a stranger" next to ``HTTPTestClient``'s 127.0.0.1.
final class MatrixSourceClient {
    struct Failure: Error, CustomStringConvertible { var description: String }

    private let fd: Int32
    private var buffered: [UInt8] = []

    /// Connects from `source` to 127.0.0.1:`port`.
    init(port: Int, from source: String) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, source, &local.sin_addr)
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = UInt16(port).bigEndian
        inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        let connected = bound == 0 && withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
        guard connected else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "connect from \(source) to 127.0.0.1:\(port): \(reason)")
        }
    }

    deinit { close(fd) }

    /// Posts `body` and reads the answer (blocking: call it on a thread of your own).
    func post(_ path: String, _ body: String) throws -> (status: Int, body: String) {
        let payload = Array(body.utf8)
        let head = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: \(payload.count)\r\n\r\n"
        let out = Array(head.utf8) + payload
        var sent = 0
        while sent < out.count {
            let n = out[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            sent += n
        }
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        var headEnd: Int?
        while headEnd == nil {
            headEnd = Self.find(separator, in: buffered)
            if headEnd == nil { try fill() }
        }
        let headText = String(decoding: buffered[..<headEnd!], as: UTF8.self)
        let lines = headText.split(separator: "\r\n")
        guard let statusLine = lines.first, let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") else {
            throw Failure(description: "no status line in \(headText)")
        }
        let length = lines.dropFirst().compactMap { line -> Int? in
            let parts = line.split(separator: ":", maxSplits: 1)
            return parts.count == 2 && parts[0].lowercased() == "content-length" ? Int(parts[1].trimmingCharacters(in: .whitespaces)) : nil
        }.first ?? 0
        let bodyStart = headEnd! + separator.count
        while buffered.count < bodyStart + length { try fill() }
        let text = String(decoding: buffered[bodyStart..<(bodyStart + length)], as: UTF8.self)
        buffered.removeFirst(bodyStart + length)
        return (status, text)
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let n = recv(fd, &chunk, chunk.count, 0)
        guard n > 0 else { throw Failure(description: n == 0 ? "the server closed the connection" : "recv: \(String(cString: strerror(errno)))") }
        buffered += chunk[0..<n]
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] && Array(haystack[i..<(i + needle.count)]) == needle {
            return i
        }
        return nil
    }

    /// Sends `count` notifies (`body(i)` for the i-th) from `source` on one connection, on a
    /// thread of its own; returns how many got each status.
    static func flood(port: Int, from source: String, count: Int, body: @escaping @Sendable (Int) -> String) async throws -> [Int: Int] {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Int: Int], any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result {
                    let client = try MatrixSourceClient(port: port, from: source)
                    var statuses: [Int: Int] = [:]
                    for i in 0..<count { statuses[try client.post("/_matrix/push/v1/notify", body(i)).status, default: 0] += 1 }
                    return statuses
                })
            }
        }
    }

    /// One notify from `source` (a connection of its own, on a thread of its own).
    static func notify(port: Int, from source: String, body: String) async throws -> (status: Int, body: String) {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(status: Int, body: String), any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result { try MatrixSourceClient(port: port, from: source).post("/_matrix/push/v1/notify", body) })
            }
        }
    }
}
