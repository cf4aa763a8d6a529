import FoundationEssentials
import HeraldCore

/// An open event stream as the hub sees it; the HTTP layer's stream implements it.
public protocol EventSink: AnyObject, Sendable {
    /// Queues bytes for the client; `false` when the stream is closed (or has just been closed
    /// because its client stopped reading).
    func send(_ bytes: [UInt8]) -> Bool
    /// Waits until `count` more bytes fit without crowding the client's buffer (a replay is
    /// paced by the client's reading, so it never overflows the bound); `false` once closed.
    func waitForRoom(_ count: Int) async -> Bool
}

/// The daemon's live streams: presence for the fan-out, the write path of the local transport,
/// and replay from the inbox when a device (re)connects.
///
/// Every event is appended to the inbox (numbered, committed) before it is written, so what a
/// client missed while its connection was dying is replayed when it reconnects with
/// `Last-Event-ID`. While a connection replays, live events for it are held back and sent after
/// the replay, skipping what the replay already sent: no gap, no duplicate across the switch.
public final class StreamHub: LocalStreams, Presence, Sendable {
    /// A device of one app.
    struct Key: Hashable, Sendable {
        var app: String
        var device: String
    }

    /// One open stream (what ``attach(_:app:user:device:after:)`` returns for ``detach(_:)``).
    public final class Connection: @unchecked Sendable {
        let sink: any EventSink
        let user: String
        let key: Key
        /// Guarded by the hub's lock.
        var replaying = true
        var held: [(seq: Int64, bytes: [UInt8])] = []
        var lastSent: Int64 = 0

        init(sink: any EventSink, user: String, key: Key) {
            self.sink = sink
            self.user = user
            self.key = key
        }
    }

    private struct State {
        var connections: [Key: [Connection]] = [:]
        /// app → user → devices with a stream open.
        var byUser: [String: [String: Set<String>]] = [:]
        /// When a device's last stream closed (for `presenceGrace`).
        var closedAt: [Key: Date] = [:]
        /// Events numbered in the inbox whose stream closed before they were written, by device
        /// and notification: when the delivery comes back (its device reconnected) it keeps its
        /// number, and is not sent again if the reconnect's replay already did.
        var orphans: [Key: [String: (seq: Int64, frame: [UInt8])]] = [:]
        var orphanCount = 0
    }

    /// Most orphaned events remembered (beyond it, a rare reconnect may see one twice).
    static let maxOrphans = 10_000

    private let inbox: any InboxStore
    private let clock: any WallClock
    private let logger: Logger
    private let maxPerUser: @Sendable (String) -> Int
    private let unpark: @Sendable (_ app: String, _ device: String) async -> Void
    private let opened: @Sendable (_ app: String, _ user: String, _ device: String) -> Void
    private let closed: @Sendable (_ app: String, _ device: String) -> Void
    private let state = Locked(State())
    private let deviceOrder = KeyedAsyncLock<Key>()
    private let open: Gauge
    private let events: Counter
    private let replayed: Counter

    /// - Parameters:
    ///   - maxPerUser: the app's `inbox.maxPerUser`.
    ///   - unpark: makes the parked deliveries of a device that just connected due now.
    ///   - opened: a stream opened (called in order with `closed`, under the hub's lock: keep it short).
    ///   - closed: the device's last stream closed (likewise).
    public init(inbox: any InboxStore, clock: any WallClock, logger: Logger, metrics: MetricsRegistry,
                maxPerUser: @escaping @Sendable (String) -> Int,
                unpark: @escaping @Sendable (_ app: String, _ device: String) async -> Void,
                opened: @escaping @Sendable (_ app: String, _ user: String, _ device: String) -> Void = { _, _, _ in },
                closed: @escaping @Sendable (_ app: String, _ device: String) -> Void = { _, _ in }) {
        self.inbox = inbox
        self.clock = clock
        self.logger = logger.labeled("streams")
        self.maxPerUser = maxPerUser
        self.unpark = unpark
        self.opened = opened
        self.closed = closed
        open = metrics.gauge("herald_streams_open", help: "Event streams open (GET /v1/stream).")
        events = metrics.counter("herald_stream_events_total", help: "Notifications written to live streams.")
        replayed = metrics.counter("herald_stream_replayed_total", help: "Inbox entries replayed to reconnecting streams.")
    }

    // MARK: Presence

    public func connectedDevices(app: String, users: [String]) -> [String: Set<String>] {
        state.withLock { s in
            guard let apps = s.byUser[app] else { return [:] }
            var result: [String: Set<String>] = [:]
            for u in users { if let d = apps[u], !d.isEmpty { result[u] = d } }
            return result
        }
    }

    /// Open streams.
    public var count: Int { state.withLock { $0.connections.values.reduce(0) { $0 + $1.count } } }

    // MARK: Connections

    /// Registers a stream for `device` of `user` and replays the inbox after `after` (when
    /// given), then lets live events through; parked deliveries of the device are made due.
    /// - Returns: the connection, for ``detach(_:)`` when the stream closes.
    @discardableResult
    public func attach(_ sink: any EventSink, app: String, user: String, device: String, after: Int64?) async -> Connection {
        let connection = register(sink, app: app, user: user, device: device)
        await catchUp(connection, after: after)
        return connection
    }

    /// Makes the device present at once (the fan-out plans its stream from now on); live
    /// events wait until ``catchUp(_:after:)``.
    public func register(_ sink: any EventSink, app: String, user: String, device: String) -> Connection {
        let key = Key(app: app, device: device)
        let connection = Connection(sink: sink, user: user, key: key)
        state.withLock { s in
            s.connections[key, default: []].append(connection)
            s.byUser[app, default: [:]][user, default: []].insert(device)
            s.closedAt[key] = nil
            opened(app, user, device)
        }
        open.add(1)
        return connection
    }

    /// Replays the inbox after `after` (when given), sends the live events that came meanwhile
    /// (without what the replay sent), goes live, and makes the device's parked deliveries due.
    public func catchUp(_ connection: Connection, after: Int64?) async {
        let sink = connection.sink, app = connection.key.app, device = connection.key.device, user = connection.user
        var replayedTo: Int64 = 0
        if let after {
            var cursor = after
            do {
                var more = true
                while more {
                    let page = try await inbox.entries(app: app, user: user, device: device, after: cursor, limit: 500)
                    more = page.count == 500
                    for entry in page {
                        let frame = ServerSentEvents.event(id: entry.seq, name: "notification", data: entry.event)
                        guard await sink.waitForRoom(frame.count), sink.send(frame) else {
                            more = false
                            break
                        }
                        cursor = entry.seq
                        replayed.increment()
                    }
                }
            } catch {
                logger.warning("cannot replay the inbox; the stream starts live", ["app": app, "device": Redact.token(device),
                                                                                     "error": String(describing: error)])
            }
            replayedTo = cursor
        }
        // Live events that came during the replay, in order, without what the replay sent.
        state.withLock { _ in
            connection.lastSent = max(connection.lastSent, replayedTo)
            for (seq, bytes) in connection.held where seq > connection.lastSent {
                _ = sink.send(bytes)
                connection.lastSent = seq
            }
            connection.held = []
            connection.replaying = false
        }
        await unpark(app, device)
    }

    /// Forgets a stream that closed.
    public func detach(_ connection: Connection) {
        let key = connection.key
        let removed: Bool = state.withLock { s in
            guard var list = s.connections[key], let i = list.firstIndex(where: { $0 === connection }) else { return false }
            list.remove(at: i)
            if list.isEmpty {
                s.connections[key] = nil
                s.byUser[key.app]?[connection.user]?.remove(key.device)
                if s.byUser[key.app]?[connection.user]?.isEmpty == true { s.byUser[key.app]?[connection.user] = nil }
                s.closedAt[key] = clock.now
                closed(key.app, key.device)
                return true
            }
            s.connections[key] = list
            return true
        }
        if removed { open.add(-1) }
    }

    // MARK: LocalStreams

    public func write(_ deliveries: [Delivery]) async -> [LocalWriteResult] {
        // From numbering to sending, a device's events go one batch at a time, so each stream
        // gets them in number order (a client's Last-Event-ID is the last event it read);
        // batches for other devices run side by side.
        await deviceOrder.run(Set(deliveries.map { Key(app: $0.app, device: $0.token) })) { await writeInOrder(deliveries) }
    }

    private func writeInOrder(_ deliveries: [Delivery]) async -> [LocalWriteResult] {
        await recoverNumbers(deliveries)
        var results = [LocalWriteResult](repeating: .notConnected(since: nil), count: deliveries.count)
        // Who is connected now; the rest need no inbox entry (they park and come back on connect).
        var candidates: [Int] = []
        state.withLock { s in
            for (i, d) in deliveries.enumerated() {
                let key = Key(app: d.app, device: d.token)
                guard let list = s.connections[key], !list.isEmpty else {
                    results[i] = .notConnected(since: s.closedAt[key])
                    continue
                }
                guard let orphan = s.orphans[key]?[d.notificationID] else {
                    candidates.append(i)
                    continue
                }
                // Numbered before its stream closed: the replay may have sent it already.
                var any = false
                for c in list {
                    if c.replaying { c.held.append((orphan.seq, orphan.frame)); any = true }
                    else if c.lastSent >= orphan.seq || c.sink.send(orphan.frame) { c.lastSent = max(c.lastSent, orphan.seq); any = true }
                }
                if any {
                    s.orphans[key]?[d.notificationID] = nil
                    s.orphanCount -= 1
                    results[i] = .written(id: orphan.seq)
                } else {
                    results[i] = .notConnected(since: s.closedAt[key] ?? clock.now)
                }
            }
        }
        guard !candidates.isEmpty else { return results }
        let now = clock.now
        var owners: [Int: String] = [:]
        let entries: [InboxEntry.New] = state.withLock { s in
            candidates.map { i in
                let d = deliveries[i]
                // A raw-token delivery has no user: the stream's owner is.
                let owner = d.user ?? s.connections[Key(app: d.app, device: d.token)]?.first?.user ?? ""
                owners[i] = owner
                return InboxEntry.New(app: d.app, user: owner, device: d.token, notificationID: d.notificationID,
                                      event: Self.eventJSON(d), createdAt: now)
            }
        }
        let numbered: [InboxEntry]
        do {
            numbered = try await inbox.append(entries, maxPerUser: maxPerUser, now: now)
        } catch {
            let reason = "cannot record the event in the inbox: \(error)"
            for i in candidates { results[i] = .unavailable(reason: reason) }
            return results
        }
        var written = 0
        state.withLock { s in
            for (i, entry) in zip(candidates, numbered) {
                let key = Key(app: entry.app, device: entry.device)
                let frame = ServerSentEvents.event(id: entry.seq, name: "notification", data: entry.event)
                var any = false
                for c in s.connections[key] ?? [] {
                    if c.replaying {
                        c.held.append((entry.seq, frame))
                        any = true
                    } else if c.sink.send(frame) {
                        c.lastSent = entry.seq
                        any = true
                    }
                }
                results[i] = any ? .written(id: entry.seq) : .notConnected(since: s.closedAt[key] ?? now)
                if any { written += 1 } else if s.orphanCount < Self.maxOrphans {
                    s.orphans[key, default: [:]][entry.notificationID] = (entry.seq, frame)
                    s.orphanCount += 1
                }
            }
        }
        events.increment(by: Int64(written))
        return results
    }

    /// A delivery sent again (a later attempt: the daemon may have stopped between numbering it
    /// and recording it delivered) keeps the number the inbox gave it: it is remembered as an
    /// orphan, so a client that already read it (its replay passed that number) does not get it twice.
    private func recoverNumbers(_ deliveries: [Delivery]) async {
        for d in deliveries where d.attempt > 1 {
            let key = Key(app: d.app, device: d.token)
            let (connected, owner, known) = state.withLock { s in
                (s.connections[key]?.isEmpty == false, d.user ?? s.connections[key]?.first?.user, s.orphans[key]?[d.notificationID] != nil)
            }
            guard connected, !known, let owner,
                  let entry = try? await inbox.entry(app: d.app, user: owner, device: d.token, notificationID: d.notificationID) else { continue }
            let frame = ServerSentEvents.event(id: entry.seq, name: "notification", data: entry.event)
            state.withLock { s in
                guard s.orphans[key]?[d.notificationID] == nil, s.orphanCount < Self.maxOrphans else { return }
                s.orphans[key, default: [:]][d.notificationID] = (entry.seq, frame)
                s.orphanCount += 1
            }
        }
    }

    /// The event's `data:`: `{"id","app","alert","badge","sound","data","created_at"}` (one line).
    static func eventJSON(_ d: Delivery) -> [UInt8] {
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.string("id", d.notificationID)
            o.string("app", d.app)
            d.content.writeDisplayJSON(into: &o)
            o.string("created_at", (d.acceptedAt ?? Date()).iso8601)
        }
        return w.bytes
    }
}
