internal import CLinux
import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A load client for event streams: many HTTP/1.1 connections on one epoll thread, each sending
/// one GET and reading a chunked `text/event-stream` answer. It parses only what a benchmark
/// needs: the status line, the chunk framing and the SSE fields `id:`, `event:` and `data:`.
/// A target with an ``Target/ackPath`` acknowledges each event it receives as Herald's acking
/// clients do (`POST <ackPath>` with `{"id": <event id>}`, from the same loop): each on a
/// connection of its own, or, with `keepAliveAcks`, as requests on a pool of kept-alive
/// connections, as a client's URLSession or a browser's `fetch` reuses its connection.
///
/// The client shares the machine's cores with the server it measures, so it costs what the
/// connections that are ready cost: one epoll set (10,000 idle streams cost nothing per wake;
/// `poll()` walked all of them on every call, which took most of a core during a broadcast),
/// and events are split into lines a run of bytes at a time.
///
/// - Important: a test client, not an HTTP client: no redirects, no TLS, no compression.
public final class StreamLoadClient {
    /// One connection to open: `GET path` on `host:port` (an IPv4 literal), with extra headers.
    public struct Target: Sendable {
        public var host: String
        public var port: Int
        public var path: String
        public var headers: [(String, String)]
        /// Where to acknowledge each event (`/v1/stream/ack?app=…&access_token=…`), or `nil`
        /// for a client that does not acknowledge.
        public var ackPath: String?

        public init(host: String, port: Int, path: String, headers: [(String, String)] = [], ackPath: String? = nil) {
            self.host = host
            self.port = port
            self.path = path
            self.headers = headers
            self.ackPath = ackPath
        }

        /// A target from an `http://host:port/path?query` URL.
        public init?(url: String, headers: [(String, String)] = []) {
            guard url.hasPrefix("http://") else { return nil }
            let rest = url.dropFirst("http://".count)
            let slash = rest.firstIndex(of: "/") ?? rest.endIndex
            let authority = rest[..<slash]
            let parts = authority.split(separator: ":")
            guard let host = parts.first, parts.count <= 2 else { return nil }
            let port = parts.count == 2 ? Int(parts[1]) : 80
            guard let port else { return nil }
            self.init(host: host == "localhost" ? "127.0.0.1" : String(host), port: port,
                      path: slash == rest.endIndex ? "/" : String(rest[slash...]), headers: headers)
        }
    }

    /// One event as it arrived: the connection's index in the target list, the SSE fields, and
    /// the arrival time (CLOCK_MONOTONIC seconds, comparable across processes on one machine).
    public struct Event: Sendable {
        public var connection: Int
        public var id: String?
        public var event: String?
        public var data: String
        public var arrival: Double
    }

    /// Counters of a run.
    public struct Counters: Sendable {
        /// Connections whose status line arrived, by status.
        public var statuses: [Int: Int] = [:]
        /// Streams (200 answers) that ended: closed or reset by the server, or ended cleanly.
        public var disconnects = 0
        /// Connections that ended before their status line (refused, reset).
        public var failedConnects = 0
        /// Comment lines (`: heartbeat`) seen.
        public var comments = 0
        public var events = 0
        /// Connections open now with a 200 answer.
        public var streaming = 0
        /// Acknowledgements answered, by status.
        public var ackStatuses: [Int: Int] = [:]
        /// Acknowledgements whose connection failed before an answer.
        public var ackFailures = 0
        /// Acknowledgements waiting for a connection or an answer.
        public var acksPending = 0
        /// When the last acknowledgement's answer arrived (CLOCK_MONOTONIC seconds).
        public var lastAckAnswer: Double = 0
    }

    /// `idle`: a kept-alive acknowledgement connection between requests.
    private enum Phase { case connecting, head, sizeLine, data(Int), dataEnd, idle, closed }

    private final class Connection {
        let index: Int
        var fd: Int32 = -1
        var phase: Phase = .connecting
        var request: [UInt8]
        var written = 0
        var input: [UInt8] = []
        var line: [UInt8] = []
        var id: String?
        var event: String?
        var data: [String] = []
        var status = 0
        /// When its connect started, and when its first comment (`: connected`) arrived
        /// (CLOCK_MONOTONIC seconds).
        var started = 0.0
        var firstComment: Double?
        /// An acknowledgement's connection (answered once, then closed or kept alive), not a stream.
        let isAck: Bool
        /// The target's index (a connection's `index` is its place in the poll set); for a
        /// kept-alive acknowledgement connection, the target of the request it sends now.
        var target: Int
        init(index: Int, target: Int, request: [UInt8], isAck: Bool = false) {
            self.index = index
            self.target = target
            self.request = request
            self.isAck = isAck
        }
    }

    private let targets: [Target]
    private let onEvent: (Event) -> Void
    private let maxPendingConnects: Int
    /// By slot (a connection's `index`); a closed acknowledgement's slot is taken again.
    private var connections: [Connection] = []
    /// The epoll set: each open connection's socket, with its slot as the event's data.
    private let epfd: Int32
    private var next = 0
    /// Acknowledgements to send: the stream's target and the event id.
    private var ackBacklog: [(target: Int, id: String)] = []
    private var ackNext = 0
    /// Acknowledgement connections open (in flight, or idle when kept alive).
    private var acksInFlight = 0
    private let maxAcksInFlight: Int
    private let keepAliveAcks: Bool
    /// Kept-alive acknowledgement connections waiting for their next request.
    private var idleAcks: [Connection] = []
    /// Slots of closed acknowledgement connections, for the next ones.
    private var freeSlots: [Int] = []
    /// Connection slots (streams, then acknowledgement connections, closed ones reused): at
    /// most the targets plus `maxAcksInFlight`.
    public var slotCount: Int { connections.count }
    /// Counters so far (read them from the thread that runs the client).
    public private(set) var counters = Counters()
    /// For each stream whose first comment (Herald's `: connected`) arrived: seconds from the
    /// start of its connect to that comment, in arrival order.
    public private(set) var connectTimes: [Double] = []
    /// Answers other than 200 that carried `Retry-After`.
    public private(set) var retryAfterAnswers = 0

    /// - Parameters:
    ///   - targets: one per connection.
    ///   - maxPendingConnects: connections waiting for their status line at once (a server's
    ///     listen backlog drops SYNs past its size, and each retry costs a second).
    ///   - onEvent: called on the client's thread for each event.
    ///   - maxAcksInFlight: acknowledgement connections open at once.
    ///   - keepAliveAcks: acknowledgements are requests on kept-alive connections (at most
    ///     `maxAcksInFlight`, each sending its next once the last was answered), not a connection each.
    public init(targets: [Target], maxPendingConnects: Int = 256, maxAcksInFlight: Int = 256, keepAliveAcks: Bool = false,
                onEvent: @escaping (Event) -> Void) {
        self.targets = targets
        self.maxPendingConnects = maxPendingConnects
        self.maxAcksInFlight = maxAcksInFlight
        self.keepAliveAcks = keepAliveAcks
        self.onEvent = onEvent
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        precondition(epfd >= 0, "stream-client: epoll_create1: \(String(cString: strerror(errno)))")
    }

    deinit {
        for c in connections where c.fd >= 0 { close(c.fd) }
        close(epfd)
    }

    /// Runs the loop on the calling thread until `done` returns true (checked after each batch
    /// of events and at least every `tick` seconds).
    public func run(tick: Double = 0.05, until done: () -> Bool) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var events = [epoll_event](repeating: epoll_event(), count: 1024)
        while !done() {
            openMore()
            openAcks()
            let n = events.withUnsafeMutableBufferPointer { epoll_wait(epfd, $0.baseAddress, Int32($0.count), Int32(tick * 1000)) }
            if n < 0 && errno != EINTR {
                fatalError("stream-client: epoll_wait over \(connections.count) connections failed: \(String(cString: strerror(errno)))")
            }
            for e in events.prefix(Int(max(0, n))) {
                let c = connections[Int(e.data.u64)]
                // Closed by an earlier event of this wake (its slot may hold a new connection
                // whose socket is not the one that was ready: it then just finds nothing to read).
                if c.fd < 0 { continue }
                let flags = e.events
                if case .connecting = c.phase {
                    if flags & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { fail(c); continue }
                    c.phase = .head
                }
                if c.written < c.request.count { writeRequest(c) }
                if c.fd >= 0, flags & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { readAll(c, &buffer) }
            }
        }
    }

    /// Closes every connection.
    public func closeAll() {
        for c in connections where c.fd >= 0 {
            close(c.fd)
            c.fd = -1
            c.phase = .closed
        }
    }

    /// Asks epoll for `events` on `c`'s socket (added on first use).
    private func watch(_ c: Connection, _ events: UInt32, add: Bool = false) {
        var event = epoll_event(events: events, data: epoll_data_t(u64: UInt64(c.index)))
        _ = epoll_ctl(epfd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &event)
    }

    /// Closes `c`'s socket (which also takes it out of the epoll set: nothing else holds it).
    private func closeSocket(_ c: Connection) {
        if c.fd >= 0 { close(c.fd) }
        c.fd = -1
    }

    private var pendingCount = 0

    /// Sends each waiting acknowledgement: on an idle kept-alive connection, or on a new
    /// connection while fewer than `maxAcksInFlight` are open.
    private func openAcks() {
        while ackNext < ackBacklog.count {
            let (index, id) = ackBacklog[ackNext]
            let t = targets[index]
            guard let path = t.ackPath else { ackNext += 1; continue }
            let body = "{\"id\":\(id)}"
            var head = "POST \(path) HTTP/1.1\r\nHost: \(t.host):\(t.port)\r\nContent-Type: application/json\r\n"
            for (k, v) in t.headers { head += "\(k): \(v)\r\n" }
            head += "Content-Length: \(body.utf8.count)\r\n" + (keepAliveAcks ? "" : "Connection: close\r\n") + "\r\n" + body
            if let c = idleAcks.popLast() {
                ackNext += 1
                c.target = index
                c.request = Array(head.utf8)
                c.written = 0
                c.phase = .head
                watch(c, EPOLLIN.rawValue | EPOLLOUT.rawValue)
                writeRequest(c)
                continue
            }
            guard acksInFlight < maxAcksInFlight else { break }
            ackNext += 1
            // A closed acknowledgement's slot is taken again: the slots stay within the streams
            // plus the acknowledgements in flight (a connection per ack would otherwise grow them
            // by one per event).
            let slot = freeSlots.popLast() ?? connections.count
            let c = Connection(index: slot, target: index, request: Array(head.utf8), isAck: true)
            if slot == connections.count { connections.append(c) } else { connections[slot] = c }
            acksInFlight += 1
            guard connectSocket(c, t) else { fail(c); continue }
        }
        if ackNext == ackBacklog.count, ackNext > 0 {
            ackBacklog.removeAll(keepingCapacity: true)
            ackNext = 0
        }
    }

    /// Starts a non-blocking connect for `c` to `t`; false when it failed at once.
    private func connectSocket(_ c: Connection, _ t: Target) -> Bool {
        c.started = Self.now()
        c.fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard c.fd >= 0 else { return false }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(t.port).bigEndian)
        addr.sin_addr.s_addr = inet_addr(t.host)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(c.fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 && errno != EINPROGRESS { return false }
        watch(c, EPOLLIN.rawValue | EPOLLOUT.rawValue, add: true)
        return true
    }

    private func openMore() {
        while next < targets.count, pendingCount < maxPendingConnects {
            let t = targets[next]
            var head = "GET \(t.path) HTTP/1.1\r\nHost: \(t.host):\(t.port)\r\nAccept: text/event-stream\r\n"
            for (k, v) in t.headers { head += "\(k): \(v)\r\n" }
            head += "\r\n"
            let c = Connection(index: connections.count, target: next, request: Array(head.utf8))
            connections.append(c)
            next += 1
            pendingCount += 1
            if !connectSocket(c, t) { fail(c) }
        }
    }

    private func writeRequest(_ c: Connection) {
        while c.written < c.request.count {
            let n = c.request[c.written...].withUnsafeBytes { send(c.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { return }
                fail(c)
                return
            }
            c.written += n
        }
        c.request = []
        c.written = 0
        watch(c, EPOLLIN.rawValue)
    }

    private func readAll(_ c: Connection, _ buffer: inout [UInt8]) {
        while c.fd >= 0 {
            let n = recv(c.fd, &buffer, buffer.count, 0)
            if n > 0 {
                let arrival = Self.now()
                parse(c, buffer[0..<n], arrival: arrival)
                continue
            }
            if n < 0 && (errno == EAGAIN || errno == EINTR) { return }
            fail(c)
            return
        }
    }

    /// Ends a connection: a failed connect before its status line, else a stream that ended.
    private func fail(_ c: Connection) {
        if c.isAck {
            if case .closed = c.phase { return }
            if case .idle = c.phase {
                // The server closed a kept-alive connection between requests: no acknowledgement lost.
                idleAcks.removeAll { $0 === c }
                closeAck(c)
                return
            }
            counters.ackFailures += 1
            finishAck(c)
            return
        }
        switch c.phase {
        case .closed: return
        case .connecting, .head:
            pendingCount -= 1
            counters.failedConnects += 1
        default:
            counters.streaming -= 1
            counters.disconnects += 1
        }
        closeSocket(c)
        c.phase = .closed
        c.input = []
        c.line = []
    }

    /// An acknowledgement answered or failed: its connection is closed, or kept alive for the next.
    private func finishAck(_ c: Connection, keepAlive: Bool = false) {
        counters.acksPending -= 1
        guard keepAlive else {
            closeAck(c)
            return
        }
        c.phase = .idle
        c.input = []
        idleAcks.append(c)
    }

    private func closeAck(_ c: Connection) {
        closeSocket(c)
        c.phase = .closed
        c.input = []
        acksInFlight -= 1
        freeSlots.append(c.index)
    }

    private func parse(_ c: Connection, _ bytes: ArraySlice<UInt8>, arrival: Double) {
        var bytes = bytes
        if case .head = c.phase {
            c.input += bytes
            guard let end = c.input.firstRange(of: [13, 10, 13, 10]) else { return }
            let head = String(decoding: c.input[..<end.lowerBound], as: UTF8.self)
            let statusLine = head.split(separator: "\r\n", maxSplits: 1).first ?? ""
            let parts = statusLine.split(separator: " ")
            c.status = parts.count >= 2 ? Int(parts[1]) ?? 0 : 0
            if c.isAck {
                counters.ackStatuses[c.status, default: 0] += 1
                counters.lastAckAnswer = arrival
                // Kept alive only after a 204 (no body to skip) that does not close, with nothing after it.
                let closes = head.lowercased().contains("connection: close")
                finishAck(c, keepAlive: keepAliveAcks && c.status == 204 && !closes && end.upperBound == c.input.endIndex)
                return
            }
            counters.statuses[c.status, default: 0] += 1
            if c.status != 200 && head.lowercased().contains("\r\nretry-after:") { retryAfterAnswers += 1 }
            pendingCount -= 1
            guard c.status == 200 else {
                // Not a stream: counted by its status only.
                closeSocket(c)
                c.phase = .closed
                c.input = []
                return
            }
            counters.streaming += 1
            bytes = c.input[end.upperBound...]
            c.input = []
            c.phase = .sizeLine
        }
        var i = bytes.startIndex
        while i < bytes.endIndex {
            switch c.phase {
            case .sizeLine:
                let b = bytes[i]; i += 1
                if b == 10 {
                    let size = Self.chunkSize(c.input)
                    c.input.removeAll(keepingCapacity: true)
                    if size == 0 {
                        // The last chunk: the stream ended cleanly.
                        fail(c)
                        return
                    }
                    c.phase = .data(size)
                } else if b != 13 {
                    c.input.append(b)
                }
            case .data(let left):
                let take = min(left, bytes.endIndex - i)
                sse(c, bytes[i..<i + take], arrival: arrival)
                i += take
                c.phase = left - take == 0 ? .dataEnd : .data(left - take)
            case .dataEnd:
                // The CRLF after a chunk's data.
                let b = bytes[i]; i += 1
                if b == 10 { c.phase = .sizeLine }
            case .head, .connecting, .idle, .closed:
                return
            }
        }
    }

    /// Splits a chunk's data into lines (LF), a run of bytes at a time, and handles each.
    private func sse(_ c: Connection, _ bytes: ArraySlice<UInt8>, arrival: Double) {
        var start = bytes.startIndex
        while let newline = bytes[start...].firstIndex(of: 10) {
            if c.line.isEmpty {
                bytes[start..<newline].withUnsafeBufferPointer { sseLine(c, $0, arrival: arrival) }
            } else {
                c.line += bytes[start..<newline]
                c.line.withUnsafeBufferPointer { sseLine(c, $0, arrival: arrival) }
                c.line.removeAll(keepingCapacity: true)
            }
            start = newline + 1
        }
        c.line += bytes[start...]
    }

    /// One SSE line (without its LF): a field, a comment, or the empty line that dispatches.
    private func sseLine(_ c: Connection, _ line: UnsafeBufferPointer<UInt8>, arrival: Double) {
        if line.isEmpty {
            // As the HTML Standard dispatches: only with data. The id persists across events, so
            // the blank line after a heartbeat comment must not count as the last event again.
            if !c.data.isEmpty {
                counters.events += 1
                onEvent(Event(connection: c.target, id: c.id, event: c.event, data: c.data.joined(separator: "\n"), arrival: arrival))
                if let id = c.id, targets[c.target].ackPath != nil {
                    ackBacklog.append((c.target, id))
                    counters.acksPending += 1
                }
            }
            c.data = []
            c.event = nil
            return
        }
        if line.first == UInt8(ascii: ":") {
            counters.comments += 1
            if c.firstComment == nil && !c.isAck {
                c.firstComment = arrival
                connectTimes.append(arrival - c.started)
            }
            return
        }
        // The field name up to the first colon, the value after it (one leading space dropped).
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
        var start = colon < line.endIndex ? colon + 1 : colon
        if start < line.endIndex && line[start] == UInt8(ascii: " ") { start += 1 }
        let value = { String(decoding: UnsafeBufferPointer(rebasing: line[start...]), as: UTF8.self) }
        switch colon - line.startIndex {
        case 2 where line[0] == UInt8(ascii: "i") && line[1] == UInt8(ascii: "d"): c.id = value()
        case 4 where Self.equals(line, "data"): c.data.append(value())
        case 5 where Self.equals(line, "event"): c.event = value()
        default: break
        }
    }

    /// Whether `line` starts with the ASCII `name`.
    private static func equals(_ line: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
        name.withUTF8Buffer { n in n.indices.allSatisfy { line[$0] == n[$0] } }
    }

    /// A chunk-size line's size (hex digits, then optional spaces, extensions after `;`), or 0.
    static func chunkSize(_ line: [UInt8]) -> Int {
        var size = 0
        for b in line {
            let digit: Int
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = Int(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = Int(b - UInt8(ascii: "a")) + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = Int(b - UInt8(ascii: "A")) + 10
            default: return size
            }
            size = size * 16 + digit
        }
        return size
    }

    /// CLOCK_MONOTONIC in seconds.
    public static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
