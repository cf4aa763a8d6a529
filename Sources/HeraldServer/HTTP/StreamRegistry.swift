import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// The open streams of one ``HTTPServer`` and the thread that writes their heartbeats.
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
    private var streams: [ObjectIdentifier: (stream: HTTPStream, key: Key?)] = [:]
    private var groups: [Key: Group] = [:]
    private var threadRunning = false
    private var stopping = false
    private let gauge: Gauge

    init(gauge: Gauge) {
        self.gauge = gauge
    }

    /// Open streams.
    var count: Int { lock.withLock { streams.count } }

    /// Every open stream.
    var all: [HTTPStream] { lock.withLock { streams.values.map(\.stream) } }

    func add(_ stream: HTTPStream) {
        lock.withLock {
            var key: Key?
            if let heartbeat = stream.body.heartbeat, heartbeat.interval > 0, !heartbeat.bytes.isEmpty {
                let k = Key(milliseconds: max(1, Int((heartbeat.interval * 1000).rounded())), bytes: heartbeat.bytes)
                groups[k, default: Group(next: Self.now() + Double(k.milliseconds) / 1000)].members.insert(stream.id)
                key = k
                startThreadIfNeeded()
            }
            streams[stream.id] = (stream, key)
            gauge.set(Double(streams.count))
            lock.signal()
        }
    }

    func remove(_ stream: HTTPStream) {
        lock.withLock {
            guard let entry = streams.removeValue(forKey: stream.id) else { return }
            if let key = entry.key {
                groups[key]?.members.remove(stream.id)
                if groups[key]?.members.isEmpty == true { groups[key] = nil }
            }
            gauge.set(Double(streams.count))
        }
    }

    /// Stops the heartbeat thread and waits until it has exited (no write after this returns).
    func stopHeartbeats() {
        lock.withLock {
            stopping = true
            lock.broadcast()
            while threadRunning { lock.wait() }
        }
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
