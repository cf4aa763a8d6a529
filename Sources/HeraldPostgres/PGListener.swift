import FoundationEssentials
import Glibc
import HeraldCore

/// A thread with its own connection that `LISTEN`s on ``PostgresSchema/channel`` and hands the
/// transports named in notifications to a handler (the daemon wakes those workers). Every
/// second it also runs `refresh` (the queue's depth). When the connection drops it reconnects
/// every second, and wakes every transport it has seen once back (notifications sent while it
/// was away are lost; the workers' 5-second poll covers the gap too).
final class PGListener: @unchecked Sendable {
    private let lock = ConditionLock()
    private var handler: (@Sendable (Set<String>) -> Void)?
    private var stopped = false
    private var finished = false

    init(conninfo: String, refresh: @escaping @Sendable (PGConnection) throws -> Void) {
        OSThread.start(name: "herald-pg-listen") { [self] in
            var db: PGConnection?
            var known = Set<String>()
            var lastRefresh = 0.0
            while !lock.withLock({ stopped }) {
                do {
                    if db == nil || db?.isOpen == false {
                        let c = try PGConnection(conninfo)
                        try c.execute("LISTEN \(PostgresSchema.channel)")
                        db = c
                        if !known.isEmpty { lock.withLock { handler }?(known) }
                    }
                    let payloads = try db!.waitForNotifications(timeoutMilliseconds: 250)
                    if !payloads.isEmpty {
                        let names = Set(payloads)
                        known.formUnion(names)
                        lock.withLock { handler }?(names)
                    }
                    let now = Date().timeIntervalSince1970
                    if now - lastRefresh >= 1 {
                        lastRefresh = now
                        try refresh(db!)
                    }
                } catch {
                    db = nil
                    _ = lock.withLock { stopped ? true : lock.wait(seconds: 1) }
                }
            }
            db = nil
            lock.withLock {
                finished = true
                lock.broadcast()
            }
        }
    }

    func setHandler(_ handler: @escaping @Sendable (Set<String>) -> Void) { lock.withLock { self.handler = handler } }

    /// Hands `transports` to the handler at once (this node's own commits, without waiting for
    /// their `NOTIFY` to come back).
    func wakeLocally(_ transports: Set<String>) { lock.withLock { handler }?(transports) }

    /// Stops the thread and closes its connection (waits at most one poll interval).
    func stop() {
        lock.lock()
        stopped = true
        lock.broadcast()
        while !finished { lock.wait() }
        lock.unlock()
    }
}
