import Foundation
import HeraldClient
import HeraldCore
import HeraldTestKit
#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP/1.1 server on 127.0.0.1 (port 0) that speaks the stream contract as a test
/// scripts it: `GET /v1/stream` answers with an event stream the test writes to, anything else
/// with what `respond` returns (keep-alive, as URLSession reuses connections). It records every
/// request, and when each stream's client closed its socket.
///
/// Each connection is served on a thread of its own (blocking sockets must not hold the
/// cooperative pool); ``stop()`` shuts every socket and waits for the threads.
final class ContractServer: @unchecked Sendable {
    struct Request: Sendable {
        var method: String
        var path: String
        var query: [String: String]
        /// Lower-cased names.
        var headers: [String: String]
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    enum Response: Sendable {
        /// An ordinary answer.
        case answer(status: Int, body: String = "", headers: [(String, String)] = [])
        /// A `text/event-stream` answer whose first bytes are `initial`; the stream stays open
        /// (``streams``) until the test ends it or the client closes it.
        case stream(initial: String)
    }

    /// An open event stream; writes are chunks of the chunked body.
    final class Stream: @unchecked Sendable {
        let request: Request
        private let fd: Int32
        private let state = Locked<(closedByPeer: Date?, ended: Bool)>((nil, false))

        init(fd: Int32, request: Request) {
            self.fd = fd
            self.request = request
        }

        /// Writes `text` as one chunk. - Returns: false once the socket is gone.
        @discardableResult
        func send(_ text: String) -> Bool {
            let bytes = Array(text.utf8)
            return ContractServer.write(fd, Array(String(bytes.count, radix: 16).utf8) + [13, 10] + bytes + [13, 10])
        }

        /// Ends the body cleanly (the last chunk) and closes the connection.
        func finish() {
            _ = ContractServer.write(fd, Array("0\r\n\r\n".utf8))
            abort()
        }

        /// Drops the connection without ending the body (a connection that died).
        func abort() {
            state.withLock { $0.ended = true }
            shutdown(fd, Int32(SHUT_RDWR))
        }

        /// When the client closed its side (the serving thread saw end of file), if it did.
        var closedByPeer: Date? { state.withLock { $0.closedByPeer } }

        func peerClosed() { state.withLock { s in if !s.ended && s.closedByPeer == nil { s.closedByPeer = Date() } } }
    }

    let port: Int
    private let listener: Int32
    private let respond: @Sendable (Request) -> Response
    private let state = Locked<(requests: [Request], streams: [Stream], fds: Set<Int32>, stopped: Bool)>(([], [], [], false))
    private let threads = DispatchGroup()

    /// - Parameter respond: called on the connection's thread for each request (it may block,
    ///   e.g. to hold an acknowledgement until the test releases it).
    init(respond: @escaping @Sendable (Request) -> Response) throws {
        self.respond = respond
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok, listen(fd, 64) == 0 else {
            close(fd)
            throw Failure("bind/listen on 127.0.0.1: \(String(cString: strerror(errno)))")
        }
        listener = fd
        port = Int(UInt16(bigEndian: addr.sin_port))
        threads.enter()
        let thread = Thread { [self] in
            acceptLoop()
            threads.leave()
        }
        thread.name = "contract-accept"
        thread.start()
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ d: String) { description = d }
    }

    var requests: [Request] { state.withLock { $0.requests } }
    var streams: [Stream] { state.withLock { $0.streams } }
    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Waits (polling, real time) until `n` streams were opened, and returns the last.
    func stream(_ n: Int, timeout: TimeInterval = 10) async throws -> Stream {
        let ok = await eventually(timeout: timeout) { self.streams.count >= n }
        guard ok else { throw Failure("stream \(n) was not opened within \(timeout) s (\(streams.count) opened)") }
        return streams[n - 1]
    }

    /// The acknowledgements received (`POST /v1/stream/ack` bodies' `id`), in order.
    var acks: [Int64] {
        requests.filter { $0.method == "POST" && $0.path == "/v1/stream/ack" }.compactMap { r in
            (try? JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any])?["id"].flatMap { ($0 as? NSNumber)?.int64Value }
        }
    }

    /// Shuts every socket and waits for the serving threads.
    func stop() async {
        let fds: Set<Int32> = state.withLock { s in
            s.stopped = true
            return s.fds
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in fds { shutdown(fd, Int32(SHUT_RDWR)) }
        let threads = self.threads
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let waiter = Thread {
                threads.wait()
                c.resume()
            }
            waiter.start()
        }
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR { continue }
                return
            }
            let stopped: Bool = state.withLock { s in
                if !s.stopped { s.fds.insert(fd) }
                return s.stopped
            }
            if stopped {
                close(fd)
                return
            }
            threads.enter()
            let thread = Thread { [self] in
                serve(fd)
                state.withLock { _ = $0.fds.remove(fd) }
                close(fd)
                threads.leave()
            }
            thread.name = "contract-connection"
            thread.start()
        }
    }

    /// Serves requests on one connection until it closes; a stream holds it until the client goes.
    private func serve(_ fd: Int32) {
        var buffer: [UInt8] = []
        while let request = Self.readRequest(fd, &buffer) {
            state.withLock { $0.requests.append(request) }
            switch respond(request) {
            case .answer(let status, let body, let headers):
                var head = "HTTP/1.1 \(status) \(status == 204 ? "No Content" : "Status")\r\n"
                for (k, v) in headers { head += "\(k): \(v)\r\n" }
                if status != 204 { head += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" }
                head += "\r\n"
                guard Self.write(fd, Array(head.utf8) + Array(body.utf8)) else { return }
            case .stream(let initial):
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
                guard Self.write(fd, Array(head.utf8)) else { return }
                let stream = Stream(fd: fd, request: request)
                if !initial.isEmpty { stream.send(initial) }
                state.withLock { $0.streams.append(stream) }
                // The client sends nothing more: a read returning 0 is its close.
                var byte = [UInt8](repeating: 0, count: 256)
                while true {
                    let n = recv(fd, &byte, byte.count, 0)
                    if n > 0 { continue }
                    if n < 0 && errno == EINTR { continue }
                    stream.peerClosed()
                    return
                }
            }
        }
    }

    static func write(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }

    /// One request (head and a Content-Length body), or nil at end of file.
    private static func readRequest(_ fd: Int32, _ buffer: inout [UInt8]) -> Request? {
        var chunk = [UInt8](repeating: 0, count: 4096)
        func fill() -> Bool {
            while true {
                let n = recv(fd, &chunk, chunk.count, 0)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return false }
                buffer += chunk[0..<n]
                return true
            }
        }
        let marker: [UInt8] = [13, 10, 13, 10]
        var end: Int?
        while end == nil {
            if buffer.count >= 4 {
                for i in 0...(buffer.count - 4) where Array(buffer[i..<i + 4]) == marker { end = i; break }
            }
            if end == nil && !fill() { return nil }
        }
        let head = String(decoding: buffer[..<end!], as: UTF8.self)
        buffer.removeFirst(end! + 4)
        let lines = head.components(separatedBy: "\r\n")
        let parts = lines[0].split(separator: " ")
        guard parts.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        while buffer.count < length { if !fill() { return nil } }
        let body = Array(buffer.prefix(length))
        buffer.removeFirst(length)
        let target = String(parts[1])
        let pathEnd = target.firstIndex(of: "?") ?? target.endIndex
        var query: [String: String] = [:]
        if pathEnd < target.endIndex {
            for pair in target[target.index(after: pathEnd)...].split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                query[String(kv[0]).removingPercentEncoding ?? String(kv[0])] = kv.count > 1 ? (String(kv[1]).removingPercentEncoding ?? String(kv[1])) : ""
            }
        }
        return Request(method: String(parts[0]), path: String(target[..<pathEnd]), query: query, headers: headers, body: body)
    }
}

/// Records each delay the client asks to wait, and waits a little (so loops cannot spin) instead.
final class RecordingSleeper: Sendable {
    private let recorded = Locked<[Duration]>([])
    let pause: Duration

    init(pause: Duration = .milliseconds(10)) { self.pause = pause }

    var delays: [Duration] { recorded.withLock { $0 } }

    var sleep: @Sendable (Duration) async throws -> Void {
        { [self] d in
            recorded.withLock { $0.append(d) }
            try await Task.sleep(for: pause)
        }
    }
}

/// A sequence of values for the client's `random`, repeating the last.
final class ScriptedRandom: Sendable {
    private let values: Locked<[Double]>
    init(_ values: [Double]) { self.values = Locked(values) }
    var next: @Sendable () -> Double {
        { [self] in values.withLock { v in v.count > 1 ? v.removeFirst() : (v.first ?? 0.5) } }
    }
}

/// What the client's `onEvent` reported, for assertions.
final class EventLog: Sendable {
    private let events = Locked<[HeraldClient.Event]>([])

    var handler: @Sendable (HeraldClient.Event) -> Void { { [self] e in events.withLock { $0.append(e) } } }

    var all: [HeraldClient.Event] { events.withLock { $0 } }
    /// Herald ids handed to `notifications`, in order.
    var received: [String] { all.compactMap { if case .received(let n) = $0 { return n.id } else { return nil } } }
    var duplicates: [String] { all.compactMap { if case .duplicate(let id, _) = $0 { return id } else { return nil } } }
    var acknowledged: [Int64] { all.compactMap { if case .acknowledged(let id) = $0 { return id } else { return nil } } }
    var connections: Int { all.filter { if case .connected = $0 { return true } else { return false } }.count }
    var waits: [Duration] { all.compactMap { if case .waiting(_, let d) = $0 { return d } else { return nil } } }
    var drops: [HeraldClientError?] { all.compactMap { if case .dropped(let e) = $0 { return .some(e) } else { return nil } } }
}
