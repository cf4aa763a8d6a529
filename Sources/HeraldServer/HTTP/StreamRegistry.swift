internal import CLinux
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// The open streams of one ``HTTPServer``, the thread that writes their heartbeats, and the
/// ``HangUpWatcher`` that sees their clients go away.
///
/// Streams with the same heartbeat (interval and bytes) share one schedule, so a tick costs one
/// write per stream and the thread sleeps until the next group is due.
final class StreamRegistry: @unchecked Sendable {
    private struct Key: Hashable {
        var milliseconds: Int
        var bytes: [UInt8]
    }

    private struct Group {
        var next: Double
        var members: Set<ObjectIdentifier> = []
    }

    private let lock = ConditionLock()
    private var streams: [ObjectIdentifier: (stream: HTTPStream, key: Key?, watch: UInt64?)] = [:]
    private var groups: [Key: Group] = [:]
    private var threadRunning = false
    private var stopping = false
    private let gauge: Gauge
    /// Sees a client's FIN or RST at once (a suspended connection is outside libmicrohttpd's poll set).
    let watcher: HangUpWatcher

    init(gauge: Gauge, hangUps: Counter? = nil) {
        self.gauge = gauge
        watcher = HangUpWatcher(hangUps: hangUps)
    }

    /// Open streams.
    var count: Int { lock.withLock { streams.count } }

    /// Every open stream.
    var all: [HTTPStream] { lock.withLock { streams.values.map(\.stream) } }

    func add(_ stream: HTTPStream) {
        lock.withLock {
            var key: Key?
            if let heartbeat = stream.heartbeat, heartbeat.interval > 0, !heartbeat.bytes.isEmpty {
                let k = Key(milliseconds: max(1, Int((heartbeat.interval * 1000).rounded())), bytes: heartbeat.bytes)
                groups[k, default: Group(next: Self.now() + Double(k.milliseconds) / 1000)].members.insert(stream.id)
                key = k
                startThreadIfNeeded()
            }
            streams[stream.id] = (stream, key, watcher.watch(stream))
            gauge.set(Double(streams.count))
            lock.signal()
        }
    }

    func remove(_ stream: HTTPStream) {
        lock.withLock {
            guard let entry = streams.removeValue(forKey: stream.id) else { return }
            // Before the socket closes (this runs in the release callback): a reused descriptor
            // must not stay in the watcher's set.
            if let watch = entry.watch { watcher.unwatch(watch, socket: stream.socket) }
            if let key = entry.key {
                groups[key]?.members.remove(stream.id)
                if groups[key]?.members.isEmpty == true { groups[key] = nil }
            }
            gauge.set(Double(streams.count))
        }
    }

    /// Stops the heartbeat thread and the hang-up watcher, and waits until both have exited
    /// (no write and no close handler from them after this returns).
    func stopHeartbeats() {
        lock.withLock {
            stopping = true
            lock.broadcast()
            while threadRunning { lock.wait() }
        }
        watcher.stop()
    }

    private func startThreadIfNeeded() {
        guard !threadRunning, !stopping else { return }
        threadRunning = true
        OSThread.start(name: "herald-heartbeat", stackSize: 256 * 1024) { [self] in run() }
    }

    private func run() {
        lock.lock()
        while !stopping {
            let now = Self.now()
            var due: [(HTTPStream, [UInt8])] = []
            for (key, group) in groups where group.next <= now {
                let interval = Double(key.milliseconds) / 1000
                var next = group.next + interval
                if next <= now { next = now + interval }
                groups[key]!.next = next
                for id in group.members {
                    if let entry = streams[id] { due.append((entry.stream, key.bytes)) }
                }
            }
            if !due.isEmpty {
                lock.unlock()
                // A failed write (client gone, or unread past the bound) closes that stream.
                for (stream, bytes) in due { stream.write(bytes) }
                lock.lock()
                continue
            }
            let earliest = groups.values.map(\.next).min()
            lock.wait(seconds: earliest.map { max(0.001, $0 - now) } ?? 3600)
        }
        threadRunning = false
        lock.broadcast()
        lock.unlock()
    }

    private static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}

/// Watches the sockets of open streams for hang-up on one thread of its own, with one epoll set
/// (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`): libmicrohttpd polls a suspended connection no more, so
/// without it a client's FIN or RST is seen only when a write fails, and the first write after a
/// close usually succeeds into the kernel's buffer.
///
/// A stream whose client hung up is told at once (``HTTPStream/hungUp()``: its close handler runs,
/// it takes no more writes, and its connection is cut and resumed so that the server closes it).
/// Only hang-ups wake the thread: bytes a client sends are not asked for (level-triggered
/// `EPOLLIN` would spin), and 10,000 idle streams cost the kernel nothing per tick.
final class HangUpWatcher: @unchecked Sendable {
    private let lock = ConditionLock()
    /// Guarded by `lock`.
    private var watched: [UInt64: HTTPStream] = [:]
    private var nextToken: UInt64 = 1
    private var running = false
    private var stopping = false
    private var epfd: Int32 = -1
    private var wakeFD: Int32 = -1
    private let hangUps: Counter?

    /// - Parameter hangUps: counts the hang-ups seen (`nil`: not counted).
    init(hangUps: Counter?) {
        self.hangUps = hangUps
    }

    deinit {
        if epfd >= 0 { close(epfd) }
        if wakeFD >= 0 { close(wakeFD) }
    }

    /// Streams being watched.
    var count: Int { lock.withLock { watched.count } }

    /// Starts watching `stream`'s socket; returns the token for ``unwatch(_:socket:)``, or `nil`
    /// when it cannot be watched (no socket, the watcher stopped, or epoll refused it: the
    /// stream then relies on failed writes, as before).
    func watch(_ stream: HTTPStream) -> UInt64? {
        let fd = stream.socket
        guard fd >= 0 else { return nil }
        return lock.withLock { () -> UInt64? in
            guard !stopping, startIfNeeded() else { return nil }
            let token = nextToken
            nextToken += 1
            watched[token] = stream
            var event = epoll_event(events: herald_epoll_hangup_events(), data: epoll_data_t(u64: token))
            guard epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) == 0 else {
                watched[token] = nil
                return nil
            }
            return token
        }
    }

    /// Stops watching (the stream's connection is about to close its socket).
    func unwatch(_ token: UInt64, socket fd: Int32) {
        lock.withLock {
            guard watched.removeValue(forKey: token) != nil else { return }
            if fd >= 0 && epfd >= 0 { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil) }
        }
    }

    /// Stops the thread and waits until it has exited.
    func stop() {
        lock.withLock {
            stopping = true
            if wakeFD >= 0 { herald_eventfd_signal(wakeFD) }
            while running { lock.wait() }
        }
    }

    /// Creates the epoll set and starts the thread (under `lock`); false when the system refuses.
    private func startIfNeeded() -> Bool {
        if running { return true }
        if epfd < 0 { epfd = epoll_create1(Int32(EPOLL_CLOEXEC)) }
        if wakeFD < 0 { wakeFD = herald_eventfd() }
        guard epfd >= 0, wakeFD >= 0 else { return false }
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: 0))
        epoll_ctl(epfd, EPOLL_CTL_ADD, wakeFD, &event)
        running = true
        let epfd = self.epfd
        OSThread.start(name: "herald-hangups", stackSize: 256 * 1024) { [self] in run(epfd) }
        return true
    }

    private func run(_ epfd: Int32) {
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while true {
            let n = events.withUnsafeMutableBufferPointer { epoll_wait(epfd, $0.baseAddress, Int32($0.count), -1) }
            if n < 0 && errno != EINTR { break }
            var gone: [HTTPStream] = []
            let stop: Bool = lock.withLock {
                for i in 0..<Int(max(0, n)) {
                    let token = events[i].data.u64
                    if token == 0 {
                        herald_eventfd_drain(wakeFD)
                        continue
                    }
                    guard let stream = watched.removeValue(forKey: token) else { continue }
                    let fd = stream.socket
                    if fd >= 0 { epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil) }
                    gone.append(stream)
                }
                return stopping
            }
            for stream in gone { stream.hungUp() }
            if !gone.isEmpty { hangUps?.increment(by: Int64(gone.count)) }
            if stop { break }
        }
        lock.withLock {
            running = false
            lock.broadcast()
        }
    }
}
