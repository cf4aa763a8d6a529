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
    /// Ends the stream (a newer stream of the same device replaced it).
    func close()
}

extension EventSink {
    /// Sinks that cannot be ended from the hub ignore it.
    public func close() {}
}

/// The daemon's live streams: presence for the fan-out, the write path of the local transport,
/// and replay from the inbox when a device (re)connects.
///
/// Every event is appended to the inbox (numbered, committed) before it is written, so what a
/// client missed while its connection was dying is replayed when it reconnects with
/// `Last-Event-ID`. While a connection replays, live events for it are held back and sent after
/// the replay, skipping what the replay already sent: no gap, no duplicate across the switch.
///
/// A stream opened with acks (``register(_:app:user:device:acking:ackTimeout:limits:)``) makes
/// its deliveries wait for the client's cumulative acknowledgement (``acknowledge(app:user:device:id:)``):
/// ``write(_:)`` answers ``LocalWriteResult/acknowledged(id:)`` once the device acknowledged
/// the event, or, past the stream's ack timeout, ``LocalWriteResult/notConnected(since:)`` with
/// no date (the delivery engine falls back at once), and the device stops counting as present
/// until it acknowledges again or reconnects. A stream without acks keeps the old rule: written
/// is delivered.
///
/// It also numbers the local transport's batches as they are claimed (``InboxNumbering``): the
/// queue appends the entries ``entries(for:now:)`` gives in the claim's own transaction, the
/// events are written at ``numbered(_:entries:)``, and ``write(_:)`` then reports those writes.
public final class StreamHub: LocalStreams, Presence, InboxNumbering, Sendable {
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
        /// The client acknowledges what it reads (`ack=1`): its deliveries wait for the ack.
        let acking: Bool
        /// How long an event written to an acking client waits for its ack.
        let ackTimeout: TimeInterval

        init(sink: any EventSink, user: String, key: Key, acking: Bool = false,
             ackTimeout: TimeInterval = StreamsConfiguration.defaultAckTimeout) {
            self.sink = sink
            self.user = user
            self.key = key
            self.acking = acking
            self.ackTimeout = ackTimeout
        }
    }

    /// How many streams one device and one user may hold (`api.streams.maxPerDevice`, `maxPerUser`).
    public struct Limits: Sendable, Equatable {
        /// Past it, a device's oldest stream is closed for its newest.
        public var perDevice: Int
        /// Past it, a user's new stream is refused.
        public var perUser: Int

        public init(perDevice: Int = StreamsConfiguration.defaultMaxPerDevice, perUser: Int = StreamsConfiguration.defaultMaxPerUser) {
            self.perDevice = perDevice
            self.perUser = perUser
        }
    }

    /// One batch's deliveries waiting for acks (guarded by the hub's lock, except `signal`).
    final class AckBatch: @unchecked Sendable {
        struct Entry {
            var index: Int
            var seq: Int64
            var notificationID: String
            var frame: [UInt8]
            var deadline: Date
            /// Written after the device had acknowledged past it (see ``AckWait/needsFreshAck``).
            var needsFreshAck = false
        }
        var pending: [Key: [Entry]] = [:]
        /// Every device the batch waits on (where ``StreamHub/State/ackWaits`` lists it).
        var keys: Set<Key> = []
        var results: [Int: LocalWriteResult] = [:]
        var remaining = 0
        let signal = WakeSignal()

        /// Settles the entries of `key` that `decide` answers for; true when the batch is complete.
        func settle(_ key: Key, _ decide: (Entry) -> LocalWriteResult?) -> Bool {
            guard var entries = pending[key] else { return remaining == 0 }
            entries.removeAll { e in
                guard let r = decide(e) else { return false }
                results[e.index] = r
                remaining -= 1
                return true
            }
            pending[key] = entries.isEmpty ? nil : entries
            return remaining == 0
        }
    }

    /// A write to an acking stream that waits for its ack.
    struct AckWait {
        var index: Int
        var key: Key
        var seq: Int64
        var notificationID: String
        var frame: [UInt8]
        var timeout: TimeInterval
        /// The device had acknowledged an id at or past this event before it was written (a
        /// later number was written first): the ack on record does not show the client has this
        /// one, so only an ack that arrives after the write does.
        var needsFreshAck = false
    }

    /// What an acknowledgement did (``acknowledge(app:user:device:id:)``).
    public enum AckResult: Sendable, Equatable {
        /// Recorded for the device's open stream(s).
        case recorded
        /// The device has no stream of this user open on this server: nothing to record.
        case noStream
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
        /// The highest event id each connected device acknowledged.
        var acked: [Key: Int64] = [:]
        /// Devices that let an event's ack time out: not present until they ack or reconnect.
        var unresponsive: Set<Key> = []
        /// Batches waiting for acks, by device.
        var ackWaits: [Key: [AckBatch]] = [:]
        /// Events numbered with their claim and written at ``numbered(_:entries:)``, by device and
        /// notification, until ``write(_:)`` of the same delivery reports them.
        var prewritten: [Key: [String: Prewritten]] = [:]
    }

    /// What ``numbered(_:entries:)`` did with one event.
    struct Prewritten {
        var seq: Int64
        var frame: [UInt8]
        var result: LocalWriteResult
        /// Taken by acking streams only: how long it waits for the ack.
        var ackTimeout: TimeInterval?
        /// The device had acknowledged past `seq` when it was written (``AckWait/needsFreshAck``).
        var ackedAhead = false
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
    /// Catch-ups started for streams the HTTP layer opened (``startCatchUp(_:after:)``).
    private let catchUps = OwnedTasks()
    private let open: Gauge
    private let events: Counter
    private let replayed: Counter
    private let acks: Counter
    private let ackTimeouts: Counter

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
        acks = metrics.counter("herald_stream_acks_total", help: "Acknowledgements received (POST /v1/stream/ack).")
        ackTimeouts = metrics.counter("herald_stream_ack_timeouts_total",
                                      help: "Events not acknowledged within their app's ackTimeout (sent to the fallback route).")
    }

    // MARK: Presence

    /// Devices with a stream open that have not let an ack time out since.
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
    /// No limit applies (a caller that wants them uses ``register(_:app:user:device:acking:ackTimeout:limits:)``).
    public func attach(_ sink: any EventSink, app: String, user: String, device: String, after: Int64?,
                       acking: Bool = false, ackTimeout: TimeInterval = StreamsConfiguration.defaultAckTimeout) async -> Connection {
        let connection = Connection(sink: sink, user: user, key: Key(app: app, device: device), acking: acking, ackTimeout: ackTimeout)
        _ = insert(connection, limits: Limits(perDevice: .max, perUser: .max))
        await catchUp(connection, after: after)
        return connection
    }

    /// Makes the device present at once (the fan-out plans its stream from now on); live
    /// events wait until ``catchUp(_:after:)``.
    ///
    /// - Parameters:
    ///   - acking: the client acknowledges events (`ack=1`); its deliveries wait for the ack.
    ///   - ackTimeout: how long an event waits for its ack before it goes to the fallback route.
    ///   - limits: when the device holds `perDevice` streams already, its oldest is closed; when
    ///     the user holds `perUser`, this one is refused.
    /// - Returns: `nil` when the user is at its limit (the caller ends the stream; see
    ///   ``refusal(app:user:device:limits:)`` to refuse before answering).
    public func register(_ sink: any EventSink, app: String, user: String, device: String, acking: Bool = false,
                         ackTimeout: TimeInterval = StreamsConfiguration.defaultAckTimeout, limits: Limits = Limits()) -> Connection? {
        let connection = Connection(sink: sink, user: user, key: Key(app: app, device: device), acking: acking, ackTimeout: ackTimeout)
        return insert(connection, limits: limits) ? connection : nil
    }

    /// Adds `connection` within `limits`, replacing the device's oldest streams; false when refused.
    private func insert(_ connection: Connection, limits: Limits) -> Bool {
        let key = connection.key, app = key.app, device = key.device, user = connection.user
        let replaced: [Connection]? = state.withLock { s in
            if Self.refusal(s, key: key, user: user, limits: limits) != nil { return nil }
            // In the order they opened: the first is the oldest.
            var list = s.connections[key] ?? []
            var replaced: [Connection] = []
            while list.count >= max(1, limits.perDevice) { replaced.append(list.removeFirst()) }
            list.append(connection)
            s.connections[key] = list
            s.byUser[app, default: [:]][user, default: []].insert(device)
            s.closedAt[key] = nil
            s.unresponsive.remove(key)
            opened(app, user, device)
            return replaced
        }
        guard let replaced else { return false }
        open.add(Double(1 - replaced.count))
        for old in replaced {
            logger.info("a newer stream of the device replaced its oldest (api.streams.maxPerDevice)",
                        ["app": app, "device": Redact.token(device)])
            old.sink.close()
        }
        return true
    }

    /// Why a new stream of `device` for `user` would be refused now (the user holds
    /// `limits.perUser` streams, not counting one that a newer stream of this device replaces),
    /// or `nil`.
    public func refusal(app: String, user: String, device: String, limits: Limits) -> String? {
        state.withLock { s in Self.refusal(s, key: Key(app: app, device: device), user: user, limits: limits) }
    }

    private static func refusal(_ s: State, key: Key, user: String, limits: Limits) -> String? {
        let devices = s.byUser[key.app]?[user] ?? []
        var count = 0
        for d in devices.union(s.unresponsive.filter { $0.app == key.app }.map(\.device)) {
            count += s.connections[Key(app: key.app, device: d)]?.filter { $0.user == user }.count ?? 0
        }
        // A device at its own limit gives up its oldest stream: the user's count does not grow.
        if (s.connections[key]?.count ?? 0) >= max(1, limits.perDevice) { count -= 1 }
        guard count >= limits.perUser else { return nil }
        return "user holds its limit of \(limits.perUser) open streams for this app (api.streams.maxPerUser); close one first"
    }

    /// Starts ``catchUp(_:after:)`` for a stream the HTTP layer just opened (its callback cannot
    /// wait); ``finishCatchUps()`` awaits it.
    public func startCatchUp(_ connection: Connection, after: Int64?) {
        catchUps.spawn { [self] in await catchUp(connection, after: after) }
    }

    /// Waits for the catch-ups started with ``startCatchUp(_:after:)`` and the unparks started by
    /// ``acknowledgeAtOnce(app:user:device:id:)`` (the daemon calls it when it stops, once its
    /// HTTP server has closed the streams).
    public func finishCatchUps() async {
        await catchUps.finish()
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
    /// Forgets a stream that closed (or was replaced). When it was the device's last, what
    /// waits for the device's acks is answered not connected (as of now).
    public func detach(_ connection: Connection) {
        let key = connection.key
        let now = clock.now
        var complete: [AckBatch] = []
        let removed: Bool = state.withLock { s in
            guard var list = s.connections[key], let i = list.firstIndex(where: { $0 === connection }) else { return false }
            list.remove(at: i)
            if list.isEmpty {
                s.connections[key] = nil
                s.byUser[key.app]?[connection.user]?.remove(key.device)
                if s.byUser[key.app]?[connection.user]?.isEmpty == true { s.byUser[key.app]?[connection.user] = nil }
                s.closedAt[key] = now
                s.acked[key] = nil
                // An unresponsive device was already reported gone.
                if s.unresponsive.remove(key) == nil { closed(key.app, key.device) }
                for batch in s.ackWaits.removeValue(forKey: key) ?? [] {
                    let done = batch.settle(key) { e in
                        Self.keepNumber(&s, key: key, notificationID: e.notificationID, seq: e.seq, frame: e.frame)
                        return .notConnected(since: now)
                    }
                    if done { complete.append(batch) }
                }
                return true
            }
            s.connections[key] = list
            return true
        }
        for batch in complete { batch.signal.notify() }
        if removed { open.add(-1) }
    }

    // MARK: LocalStreams

    public func write(_ deliveries: [Delivery]) async -> [LocalWriteResult] {
        // From numbering to sending, a device's events go one batch at a time, so each stream
        // gets them in number order (a client's Last-Event-ID is the last event it read);
        // batches for other devices run side by side.
        let written = await deviceOrder.run(Set(deliveries.map { Key(app: $0.app, device: $0.streamKey) })) { await writeInOrder(deliveries) }
        // Outside the device's order: a frozen client's ack timeout does not hold back the
        // device's next batch (which finds it unresponsive, or acknowledged, meanwhile).
        guard !written.waits.isEmpty else { return written.results }
        var results = written.results
        for (i, r) in await awaitAcks(written.waits) { results[i] = r }
        return results
    }

    /// What ``writeInOrder(_:)`` did: a result per delivery, and the writes to acking streams.
    struct Written: Sendable {
        var results: [LocalWriteResult]
        var waits: [AckWait]
    }

    private func writeInOrder(_ deliveries: [Delivery]) async -> Written {
        await recoverNumbers(deliveries)
        var results = [LocalWriteResult](repeating: .notConnected(since: nil), count: deliveries.count)
        var waits: [AckWait] = []
        let ackTimeout = Self.ackTimeout
        // Who is connected now; the rest need no inbox entry (they park and come back on connect).
        var candidates: [Int] = []
        state.withLock { s in
            for (i, d) in deliveries.enumerated() {
                let key = Key(app: d.app, device: d.streamKey)
                // Numbered with its claim and written then (``numbered(_:entries:)``): report that.
                if let p = s.prewritten[key]?.removeValue(forKey: d.notificationID) {
                    if s.prewritten[key]?.isEmpty == true { s.prewritten[key] = nil }
                    results[i] = p.result
                    if let timeout = p.ackTimeout {
                        waits.append(AckWait(index: i, key: key, seq: p.seq, notificationID: d.notificationID, frame: p.frame, timeout: timeout,
                                             needsFreshAck: p.ackedAhead))
                    }
                    continue
                }
                guard let list = s.connections[key], !list.isEmpty else {
                    results[i] = .notConnected(since: s.closedAt[key])
                    continue
                }
                // Its ack timed out: not in the foreground until it acks again or reconnects.
                if s.unresponsive.contains(key) { continue }
                guard let orphan = s.orphans[key]?[d.notificationID] else {
                    candidates.append(i)
                    continue
                }
                // Numbered before its stream closed: the replay may have sent it already.
                var takers: [Connection] = []
                for c in list {
                    if c.replaying { c.held.append((orphan.seq, orphan.frame)); takers.append(c) }
                    else if c.lastSent >= orphan.seq || c.sink.send(orphan.frame) { c.lastSent = max(c.lastSent, orphan.seq); takers.append(c) }
                }
                if !takers.isEmpty {
                    s.orphans[key]?[d.notificationID] = nil
                    s.orphanCount -= 1
                    results[i] = .written(id: orphan.seq)
                    if let timeout = ackTimeout(takers) { waits.append(AckWait(index: i, key: key, seq: orphan.seq, notificationID: d.notificationID, frame: orphan.frame, timeout: timeout)) }
                } else {
                    results[i] = .notConnected(since: s.closedAt[key] ?? clock.now)
                }
            }
        }
        guard !candidates.isEmpty else { return Written(results: results, waits: waits) }
        let now = clock.now
        var owners: [Int: String] = [:]
        let entries: [InboxEntry.New] = state.withLock { s in
            candidates.map { i in
                let d = deliveries[i]
                // A raw-token delivery has no user: the stream's owner is.
                let owner = d.user ?? s.connections[Key(app: d.app, device: d.streamKey)]?.first?.user ?? ""
                owners[i] = owner
                return InboxEntry.New(app: d.app, user: owner, device: d.streamKey, notificationID: d.notificationID,
                                      event: Self.eventJSON(d), createdAt: now)
            }
        }
        let numbered: [InboxEntry]
        do {
            numbered = try await inbox.append(entries, maxPerUser: maxPerUser, now: now)
        } catch {
            let reason = "cannot record the event in the inbox: \(error)"
            for i in candidates { results[i] = .unavailable(reason: reason) }
            return Written(results: results, waits: waits)
        }
        var written = 0
        state.withLock { s in
            for (i, entry) in zip(candidates, numbered) {
                let key = Key(app: entry.app, device: entry.device)
                let frame = ServerSentEvents.event(id: entry.seq, name: "notification", data: entry.event)
                let takers = Self.send(&s, key: key, seq: entry.seq, frame: frame)
                let any = !takers.isEmpty
                results[i] = any ? .written(id: entry.seq) : .notConnected(since: s.closedAt[key] ?? now)
                if let timeout = ackTimeout(takers) { waits.append(AckWait(index: i, key: key, seq: entry.seq, notificationID: entry.notificationID, frame: frame, timeout: timeout)) }
                if any { written += 1 } else if s.orphanCount < Self.maxOrphans {
                    s.orphans[key, default: [:]][entry.notificationID] = (entry.seq, frame)
                    s.orphanCount += 1
                }
            }
        }
        events.increment(by: Int64(written))
        return Written(results: results, waits: waits)
    }

    /// Taken by acking streams only: wait for the ack (the longest of their timeouts).
    private static func ackTimeout(_ takers: [Connection]) -> TimeInterval? {
        guard !takers.isEmpty, takers.allSatisfy(\.acking) else { return nil }
        return takers.map(\.ackTimeout).max()
    }

    /// Sends a numbered event to the device's streams (held back for one still replaying);
    /// returns the streams that took it. Under the hub's lock.
    private static func send(_ s: inout State, key: Key, seq: Int64, frame: [UInt8]) -> [Connection] {
        var takers: [Connection] = []
        for c in s.unresponsive.contains(key) ? [] : s.connections[key] ?? [] {
            if c.replaying {
                c.held.append((seq, frame))
                takers.append(c)
            } else if c.sink.send(frame) {
                c.lastSent = seq
                takers.append(c)
            }
        }
        return takers
    }

    // MARK: InboxNumbering

    /// First attempts whose device has a stream open here and counts as present: their events.
    /// The rest go through ``write(_:)``'s own path (numbered there, or not at all). Called on
    /// the store's writer thread: a look-up under the hub's lock, the JSON outside it.
    public func entries(for deliveries: [Delivery], now: Date) -> [InboxEntry.New?] {
        let owners: [String?] = state.withLock { s in
            deliveries.map { d in
                let key = Key(app: d.app, device: d.streamKey)
                guard d.attempt == 1, let list = s.connections[key], let first = list.first, !s.unresponsive.contains(key),
                      s.orphans[key]?[d.notificationID] == nil, s.prewritten[key]?[d.notificationID] == nil else { return nil }
                // A raw-token delivery has no user: the stream's owner is.
                return d.user ?? first.user
            }
        }
        var events: [String: [UInt8]] = [:]   // one event per notification
        return zip(deliveries, owners).map { d, owner in
            guard let owner else { return nil }
            let event: [UInt8]
            if let known = events[d.notificationID] { event = known } else {
                event = Self.eventJSON(d)
                events[d.notificationID] = event
            }
            return InboxEntry.New(app: d.app, user: owner, device: d.streamKey, notificationID: d.notificationID, event: event, createdAt: now)
        }
    }

    public func inboxMaxPerUser(_ app: String) -> Int { maxPerUser(app) }

    /// Writes the events numbered with their claim, in the devices' order (as ``write(_:)``
    /// does), and keeps each result for ``write(_:)`` of the same delivery. An event no stream
    /// took (its device closed meanwhile) keeps its number for the delivery's return.
    public func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async {
        var keys: Set<Key> = []
        for e in entries { if let e { keys.insert(Key(app: e.app, device: e.device)) } }
        guard !keys.isEmpty else { return }
        let written = await deviceOrder.run(keys) { () -> Int in
            let now = clock.now
            // Framed outside the lock, one notification's data lines split once for all its streams.
            var lines: [String: [UInt8]] = [:]
            var framed: [(entry: InboxEntry, frame: [UInt8])] = []
            framed.reserveCapacity(entries.count)
            for e in entries {
                guard let e else { continue }
                if lines[e.notificationID] == nil { lines[e.notificationID] = ServerSentEvents.dataLines(e.event) }
                framed.append((e, ServerSentEvents.event(id: e.seq, name: "notification", dataLines: lines[e.notificationID]!)))
            }
            // The lock in slices: a claim's look-up, an ack or a close on the server thread waits
            // for one slice, not for the whole batch (the device lock keeps each device's order).
            var written = 0
            var start = 0
            while start < framed.count {
                let slice = framed[start..<min(start + Self.writesPerLock, framed.count)]
                written += state.withLock { s in
                    var written = 0
                    for (e, frame) in slice {
                        let key = Key(app: e.app, device: e.device)
                        let takers = Self.send(&s, key: key, seq: e.seq, frame: frame)
                        let result: LocalWriteResult
                        if takers.isEmpty {
                            result = .notConnected(since: s.closedAt[key] ?? now)
                            Self.keepNumber(&s, key: key, notificationID: e.notificationID, seq: e.seq, frame: frame)
                        } else {
                            result = .written(id: e.seq)
                            written += 1
                        }
                        s.prewritten[key, default: [:]][e.notificationID] = Prewritten(seq: e.seq, frame: frame, result: result,
                                                                                       ackTimeout: Self.ackTimeout(takers),
                                                                                       ackedAhead: (s.acked[key] ?? 0) >= e.seq)
                    }
                    return written
                }
                start = slice.endIndex
            }
            return written
        }
        events.increment(by: Int64(written))
    }

    /// Numbered events written per hold of the hub's lock (``numbered(_:entries:)``).
    static let writesPerLock = 128

    // MARK: Acknowledgements

    /// Records that `device` (of `user`) has every event up to `id` (cumulative). Deliveries
    /// waiting for it end acknowledged; a device whose ack had timed out counts as present
    /// again (its parked deliveries are made due before this returns). An id beyond what was
    /// sent acknowledges everything up to it: a client only fools itself.
    @discardableResult
    public func acknowledge(app: String, user: String, device: String, id: Int64) async -> AckResult {
        let (result, revived) = record(app: app, user: user, device: device, id: id)
        if revived { await unpark(app, device) }
        return result
    }

    /// ``acknowledge(app:user:device:id:)`` without waiting: for the HTTP server's own thread,
    /// so an ack is answered without suspending its connection (a suspension and resume of one
    /// connection costs libmicrohttpd a walk of every suspended one, that is of every open
    /// stream). A revived device's parked deliveries are made due in a task the hub owns.
    @discardableResult
    public func acknowledgeAtOnce(app: String, user: String, device: String, id: Int64) -> AckResult {
        let (result, revived) = record(app: app, user: user, device: device, id: id)
        if revived { catchUps.spawn { [self] in await unpark(app, device) } }
        return result
    }

    /// The ack's effect on the hub's state; `revived`: the device counts as present again.
    private func record(app: String, user: String, device: String, id: Int64) -> (AckResult, revived: Bool) {
        let key = Key(app: app, device: device)
        var complete: [AckBatch] = []
        let (result, revived): (AckResult, Bool) = state.withLock { s in
            guard let list = s.connections[key], list.contains(where: { $0.user == user }) else { return (.noStream, false) }
            let acked = max(s.acked[key] ?? 0, id)
            s.acked[key] = acked
            var revived = false
            if s.unresponsive.remove(key) != nil {
                s.byUser[app, default: [:]][user, default: []].insert(device)
                opened(app, user, device)
                revived = true
            }
            // An event written after the device had acknowledged past it counts only with an
            // ack that arrived since (this one) and covers it.
            for batch in s.ackWaits[key] ?? [] where batch.settle(key, { e in
                e.seq <= acked && (!e.needsFreshAck || id >= e.seq) ? .acknowledged(id: e.seq) : nil
            }) {
                complete.append(batch)
            }
            s.ackWaits[key]?.removeAll { $0.pending[key] == nil }
            if s.ackWaits[key]?.isEmpty == true { s.ackWaits[key] = nil }
            return (.recorded, revived)
        }
        for batch in complete { batch.signal.notify() }
        if result == .recorded { acks.increment() }
        if revived {
            logger.info("a device acknowledged again after an ack timeout; it counts as in the foreground", ["app": app, "device": Redact.token(device)])
        }
        return (result, revived)
    }

    /// The event id of `notificationID` when it was written to `device`'s stream and waits for
    /// its ack on this server (`nil` otherwise): the status API shows it.
    public func awaitingAck(app: String, device: String, notificationID: String) -> Int64? {
        let key = Key(app: app, device: device)
        return state.withLock { s in
            for batch in s.ackWaits[key] ?? [] {
                if let e = batch.pending[key]?.first(where: { $0.notificationID == notificationID }) { return e.seq }
            }
            return nil
        }
    }

    /// An event written and not acknowledged keeps its number: when its delivery comes back (the
    /// device reconnected or acknowledged again), it is not numbered and sent a second time to a
    /// client that has it (see ``writeInOrder(_:)``'s orphans).
    private static func keepNumber(_ s: inout State, key: Key, notificationID: String, seq: Int64, frame: [UInt8]) {
        guard s.orphans[key]?[notificationID] == nil, s.orphanCount < maxOrphans else { return }
        s.orphans[key, default: [:]][notificationID] = (seq, frame)
        s.orphanCount += 1
    }

    /// Waits until each write is acknowledged, its device has gone, or its ack timeout passed
    /// (the device then stops counting as present). A cancelled wait answers what was written.
    private func awaitAcks(_ waits: [AckWait]) async -> [Int: LocalWriteResult] {
        let batch = AckBatch()
        let start = clock.now
        state.withLock { s in
            for w in waits {
                if let acked = s.acked[w.key], acked >= w.seq, !w.needsFreshAck {
                    batch.results[w.index] = .acknowledged(id: w.seq)
                } else if s.connections[w.key] == nil {
                    // It closed between the write and now.
                    Self.keepNumber(&s, key: w.key, notificationID: w.notificationID, seq: w.seq, frame: w.frame)
                    batch.results[w.index] = .notConnected(since: s.closedAt[w.key] ?? start)
                } else {
                    batch.pending[w.key, default: []].append(.init(index: w.index, seq: w.seq, notificationID: w.notificationID,
                                                                   frame: w.frame, deadline: start.addingTimeInterval(w.timeout),
                                                                   needsFreshAck: w.needsFreshAck))
                    batch.remaining += 1
                }
            }
            batch.keys = Set(batch.pending.keys)
            for key in batch.keys { s.ackWaits[key, default: []].append(batch) }
        }
        while true {
            let now = clock.now
            let cancelled = Task.isCancelled
            var timedOut = 0
            let next: Date? = state.withLock { s in
                for key in Array(batch.pending.keys) {
                    var late = 0
                    _ = batch.settle(key) { e in
                        if cancelled { return .written(id: e.seq) }
                        guard e.deadline <= now else { return nil }
                        late += 1
                        Self.keepNumber(&s, key: key, notificationID: e.notificationID, seq: e.seq, frame: e.frame)
                        return .notConnected(since: nil)
                    }
                    timedOut += late
                    if late > 0 && s.connections[key] != nil && s.unresponsive.insert(key).inserted {
                        // Frozen or unreachable: out of the foreground, here and for the other nodes.
                        for c in s.connections[key] ?? [] {
                            s.byUser[key.app]?[c.user]?.remove(key.device)
                            if s.byUser[key.app]?[c.user]?.isEmpty == true { s.byUser[key.app]?[c.user] = nil }
                        }
                        closed(key.app, key.device)
                    }
                }
                if batch.remaining == 0 {
                    for key in batch.keys {
                        s.ackWaits[key]?.removeAll { $0 === batch }
                        if s.ackWaits[key]?.isEmpty == true { s.ackWaits[key] = nil }
                    }
                    return nil
                }
                return batch.pending.values.lazy.flatMap { $0 }.map(\.deadline).min()
            }
            if timedOut > 0 {
                ackTimeouts.increment(by: Int64(timedOut))
                logger.info("events were not acknowledged in time; they go to the fallback route and the device leaves the foreground",
                            ["events": String(timedOut)])
            }
            guard let next else { break }
            await batch.signal.wait(until: next, clock: clock)
        }
        return batch.results
    }

    /// A delivery sent again (a later attempt: the daemon may have stopped between numbering it
    /// and recording it delivered) keeps the number the inbox gave it: it is remembered as an
    /// orphan, so a client that already read it (its replay passed that number) does not get it twice.
    private func recoverNumbers(_ deliveries: [Delivery]) async {
        for d in deliveries where d.attempt > 1 {
            let key = Key(app: d.app, device: d.streamKey)
            let (connected, owner, known) = state.withLock { s in
                (s.connections[key]?.isEmpty == false, d.user ?? s.connections[key]?.first?.user, s.orphans[key]?[d.notificationID] != nil)
            }
            guard connected, !known, let owner,
                  let entry = try? await inbox.entry(app: d.app, user: owner, device: d.streamKey, notificationID: d.notificationID) else { continue }
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
