import FoundationEssentials
import Glibc
import HeraldCore

/// The `presence` table: which node each device's live stream is open on, shared by the nodes.
///
/// One thread with its own connection owns the table for this node:
/// - it writes what changed in this node's streams (a batch per wake-up, in the order they
///   happened) and `NOTIFY`s ``PostgresSchema/presenceChannel``;
/// - it renews this node's rows every ``heartbeat`` (`seen`); rows not renewed for ``timeToLive``
///   belong to a node that died and count as absent (and are deleted after four times that);
/// - it `LISTEN`s, and reloads the other nodes' devices (for the fan-out) when one of them
///   changed its streams, and at every heartbeat.
///
/// The queue's claim reads the table: a local delivery whose device has a stream on another
/// live node (and none on this one) is left for that node (``PostgresDeliveryQueue``).
final class PostgresPresence: PresenceDirectory, @unchecked Sendable {
    /// How often a node renews its rows.
    static let heartbeat = 5.0
    /// How long a row counts without renewal (three heartbeats): after a node dies, its devices'
    /// local deliveries wait this long before another node takes them.
    static let timeToLive = 15

    private struct Key: Hashable {
        var app: String
        var device: String
    }

    private struct Entry: Equatable {
        var user: String
        var transport: String
    }

    private let nodeID: String
    private let lock = ConditionLock()
    private let wake = PGWakeSignal()
    private let remoteGauge: Gauge
    // Guarded by `lock`.
    private var desired: [Key: Entry] = [:]
    private var generation = 0
    private var waiters: [(generation: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    private var remote: [String: [String: Set<String>]] = [:]
    private var stopped = false
    private var finished = false

    init(conninfo: String, nodeID: String, metrics: MetricsRegistry) {
        self.nodeID = nodeID
        remoteGauge = metrics.gauge("herald_presence_remote_devices", help: "Devices with a live stream open on another node, as this node last read them.")
        OSThread.start(name: "herald-pg-presence") { [self] in run(conninfo) }
    }

    // MARK: PresenceDirectory

    func connected(app: String, user: String, device: String, transport: String) {
        lock.withLock {
            desired[Key(app: app, device: device)] = Entry(user: user, transport: transport)
            generation += 1
        }
        wake.signal()
    }

    func published() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let closed: Bool = lock.withLock {
                if stopped { return true }
                waiters.append((generation, continuation))
                return false
            }
            if closed { return continuation.resume(throwing: StoreUnavailableError("presence: the storage is closing")) }
            wake.signal()
        }
    }

    func disconnected(app: String, device: String) {
        lock.withLock {
            desired[Key(app: app, device: device)] = nil
            generation += 1
        }
        wake.signal()
    }

    func remoteDevices(app: String, users: [String]) -> [String: Set<String>] {
        lock.withLock {
            guard let byUser = remote[app] else { return [:] }
            var result: [String: Set<String>] = [:]
            for u in users { if let d = byUser[u], !d.isEmpty { result[u] = d } }
            return result
        }
    }

    /// Stops the thread; this node's rows are deleted (its streams are gone).
    func stop() {
        lock.lock()
        stopped = true
        lock.broadcast()
        lock.unlock()
        wake.signal()
        lock.lock()
        while !finished { lock.wait() }
        lock.unlock()
    }

    // MARK: The thread

    private func run(_ conninfo: String) {
        var db: PGConnection?
        var written: [Key: Entry] = [:]
        var lastBeat = 0.0, lastReload = 0.0
        var reload = true
        while !lock.withLock({ stopped }) {
            do {
                if db == nil || db?.isOpen == false {
                    let c = try PGConnection(conninfo)
                    try c.execute("LISTEN \(PostgresSchema.presenceChannel)")
                    // Away for a while: rewrite this node's rows from scratch.
                    try c.execute("DELETE FROM presence WHERE node = $1", [nodeID])
                    written = [:]
                    db = c
                    reload = true
                }
                let (want, upTo) = lock.withLock { (desired, generation) }
                if want != written {
                    try flush(db!, want: want, written: written)
                    written = want
                }
                resumeWaiters(upTo: upTo, with: nil)
                let now = Date().timeIntervalSince1970
                if now - lastBeat >= Self.heartbeat {
                    lastBeat = now
                    try db!.execute("UPDATE presence SET seen = now() WHERE node = $1", [nodeID])
                    try db!.execute("DELETE FROM presence WHERE seen < now() - make_interval(secs => $1)", [String(Self.timeToLive * 4)])
                    reload = true
                }
                if reload, now - lastReload >= 0.1 {
                    try reloadRemote(db!)
                    lastReload = now
                    reload = false
                }
                let dirty = lock.withLock { generation != upTo }
                if dirty { continue }
                let timeout = reload ? 100 : Int32(max(1, (lastBeat + Self.heartbeat - Date().timeIntervalSince1970) * 1000))
                let changes = try db!.waitForNotifications(timeoutMilliseconds: min(timeout, 1000), wake: wake)
                if changes.contains(where: { $0 != nodeID }) { reload = true }
            } catch {
                db = nil
                resumeWaiters(upTo: lock.withLock { generation }, with: error)
                _ = lock.withLock { stopped ? true : lock.wait(seconds: 1) }
            }
        }
        if let db { _ = try? db.execute("DELETE FROM presence WHERE node = $1", [nodeID]) }
        resumeWaiters(upTo: Int.max, with: StoreUnavailableError("presence: the storage closed"))
        lock.withLock {
            finished = true
            lock.broadcast()
        }
    }

    /// Writes the difference between `written` and `want` in one statement, with a `NOTIFY`.
    private func flush(_ db: PGConnection, want: [Key: Entry], written: [Key: Entry]) throws {
        let gone = written.keys.filter { want[$0] == nil }
        let changed = want.filter { written[$0.key] != $0.value }
        try db.execute("""
            WITH gone AS (
                DELETE FROM presence p USING unnest($2::text[], $3::text[]) AS g(app, device)
                WHERE p.node = $1 AND p.app = g.app AND p.device = g.device),
            came AS (
                INSERT INTO presence (app, device, node, "user", transport)
                SELECT app, device, $1, u, t FROM unnest($4::text[], $5::text[], $6::text[], $7::text[]) AS c(app, device, u, t)
                ON CONFLICT (app, device, node) DO UPDATE SET "user" = excluded."user", transport = excluded.transport, seen = now())
            SELECT pg_notify($8, $1)
            """, [nodeID, PGArray.text(gone.map(\.app)), PGArray.text(gone.map(\.device)),
                  PGArray.text(changed.map(\.key.app)), PGArray.text(changed.map(\.key.device)),
                  PGArray.text(changed.map(\.value.user)), PGArray.text(changed.map(\.value.transport)), PostgresSchema.presenceChannel])
    }

    /// Reads the devices with a stream on another live node.
    private func reloadRemote(_ db: PGConnection) throws {
        let r = try db.execute("""
            SELECT DISTINCT app, "user", device FROM presence
            WHERE node <> $1 AND seen >= now() - make_interval(secs => $2)
            """, [nodeID, String(Self.timeToLive)])
        var byApp: [String: [String: Set<String>]] = [:]
        for i in 0..<r.count { byApp[r.string(i, 0), default: [:]][r.string(i, 1), default: []].insert(r.string(i, 2)) }
        lock.withLock { remote = byApp }
        remoteGauge.set(Double(r.count))
    }

    private func resumeWaiters(upTo: Int, with error: (any Error)?) {
        let ready: [CheckedContinuation<Void, any Error>] = lock.withLock {
            let (done, rest) = (waiters.filter { $0.generation <= upTo }, waiters.filter { $0.generation > upTo })
            waiters = rest
            return done.map(\.continuation)
        }
        for c in ready {
            if let error { c.resume(throwing: error) } else { c.resume() }
        }
    }
}
