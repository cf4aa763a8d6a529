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
    /// A device of one app. Its hash is computed once, when the key is made: a broadcast looks
    /// each device up several times per event (streams, acks, waits, the order lock), and
    /// hashing two strings each time was a fifth of the hub's CPU.
    struct Key: Hashable, Sendable {
        let app: String
        let device: String
        private let hash: Int

        init(app: String, device: String) {
            self.app = app
            self.device = device
            var hasher = Hasher()
            hasher.combine(app)
            hasher.combine(device)
            hash = hasher.finalize()
        }

        static func == (a: Key, b: Key) -> Bool { a.hash == b.hash && a.device == b.device && a.app == b.app }
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
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
    /// Its entries wait on their devices (``Device/awaiting``), where an ack finds them.
    final class AckBatch: @unchecked Sendable {
        var results: [Int: LocalWriteResult] = [:]
        /// Entries not settled yet.
        var remaining = 0
        /// The devices holding its entries (a device may be listed twice).
        var devices: [Device] = []
        let signal = WakeSignal()

        /// Settles one entry; true when that completed the batch.
        func settle(_ index: Int, _ result: LocalWriteResult) -> Bool {
            results[index] = result
            remaining -= 1
            return remaining == 0
        }
    }

    /// An event written to an acking stream, waiting on its device for the ack.
    struct AckEntry {
        let batch: AckBatch
        let wait: AckWait
        /// When it stops waiting (its write's answer, plus the stream's ack timeout).
        let deadline: Date
    }

    /// What the hub holds for one device of one app while it has streams open, events waiting
    /// for its acks, or events numbered for it that no stream took (guarded by the hub's lock).
    /// A broadcast's event finds all of it with one look-up.
    final class Device: @unchecked Sendable {
        let key: Key
        /// In the order they opened: the first is the oldest.
        var connections: [Connection] = []
        /// The highest event id it acknowledged while connected.
        var acked: Int64?
        /// Written to an acking stream and not acknowledged yet, in the order written.
        var awaiting: [AckEntry] = []
        /// Events numbered in the inbox that no stream took (its streams closed before they were
        /// written, or their ack timed out), by notification: when the delivery comes back (its
        /// device reconnected) it keeps its number, and is not sent again if the reconnect's
        /// replay already did.
        var orphans: [String: (seq: Int64, frame: [UInt8])] = [:]

        init(key: Key) { self.key = key }

        /// Nothing left to remember: the record can go.
        var isIdle: Bool { connections.isEmpty && awaiting.isEmpty && orphans.isEmpty }
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
        /// Every device with streams open, acks awaited or orphaned events.
        var devices: [Key: Device] = [:]
        /// app → user → devices with a stream open.
        var byUser: [String: [String: Set<String>]] = [:]
        /// When a device's last stream closed (for `presenceGrace`).
        var closedAt: [Key: Date] = [:]
        /// Orphaned events on all devices (``Device/orphans``).
        var orphanCount = 0
        /// Devices that let an event's ack time out: not present until they ack or reconnect.
        var unresponsive: Set<Key> = []
        /// Events numbered with their claim and written at ``numbered(_:entries:)``, by delivery,
        /// until ``write(_:)`` of the same delivery reports them.
        var prewritten: [Int64: Prewritten] = [:]

        /// Whether `key` let an ack time out (quick when none did, as in a broadcast).
        func isUnresponsive(_ key: Key) -> Bool { !unresponsive.isEmpty && unresponsive.contains(key) }

        /// The record of `key`, made when there is none.
        mutating func device(_ key: Key) -> Device {
            if let d = devices[key] { return d }
            let d = Device(key: key)
            devices[key] = d
            return d
        }

        /// Forgets `d` when it holds nothing any more (and is still the record of its key).
        mutating func forgetIfIdle(_ d: Device) {
            if d.isIdle, devices[d.key] === d { devices[d.key] = nil }
        }
    }

    /// What ``numbered(_:entries:)`` did with one event.
    struct Prewritten {
        var key: Key
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
    public var count: Int { state.withLock { $0.devices.values.reduce(0) { $0 + $1.connections.count } } }

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
            let d = s.device(key)
            var replaced: [Connection] = []
            while d.connections.count >= max(1, limits.perDevice) { replaced.append(d.connections.removeFirst()) }
            d.connections.append(connection)
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
            count += s.devices[Key(app: key.app, device: d)]?.connections.filter { $0.user == user }.count ?? 0
        }
        // A device at its own limit gives up its oldest stream: the user's count does not grow.
        if (s.devices[key]?.connections.count ?? 0) >= max(1, limits.perDevice) { count -= 1 }
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
            guard let d = s.devices[key], let i = d.connections.firstIndex(where: { $0 === connection }) else { return false }
            d.connections.remove(at: i)
            guard d.connections.isEmpty else { return true }
            s.byUser[key.app]?[connection.user]?.remove(key.device)
            if s.byUser[key.app]?[connection.user]?.isEmpty == true { s.byUser[key.app]?[connection.user] = nil }
            s.closedAt[key] = now
            d.acked = nil
            // An unresponsive device was already reported gone.
            if s.unresponsive.remove(key) == nil { closed(key.app, key.device) }
            let waiting = d.awaiting
            d.awaiting = []
            for e in waiting {
                Self.keepNumber(&s, d, notificationID: e.wait.notificationID, seq: e.wait.seq, frame: e.wait.frame)
                if e.batch.settle(e.wait.index, .notConnected(since: now)) { complete.append(e.batch) }
            }
            s.forgetIfIdle(d)
            return true
        }
        for batch in complete { batch.signal.notify() }
        if removed { open.add(-1) }
    }

    // MARK: LocalStreams

    public func write(_ deliveries: [Delivery]) async -> [LocalWriteResult] {
        // From numbering to sending, a device's events go one batch at a time, so each stream
        // gets them in number order (a client's Last-Event-ID is the last event it read);
        // batches for other devices run side by side. A batch written when it was numbered
        // (the broadcast's case) has nothing left to send: its results are taken at once.
        let written: Written
        if let prewritten = takePrewritten(deliveries) {
            written = prewritten
        } else {
            written = await deviceOrder.run(Set(deliveries.map { Key(app: $0.app, device: $0.streamKey) })) { await writeInOrder(deliveries) }
        }
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

    /// The results of a batch whose every delivery was written at ``numbered(_:entries:)``, or
    /// `nil` (then nothing was taken) when one was not.
    private func takePrewritten(_ deliveries: [Delivery]) -> Written? {
        state.withLock { s in
            guard deliveries.indices.allSatisfy({ s.prewritten[deliveries[$0].id] != nil }) else { return nil }
            var results: [LocalWriteResult] = []
            results.reserveCapacity(deliveries.count)
            var waits: [AckWait] = []
            waits.reserveCapacity(deliveries.count)
            for i in deliveries.indices {
                let p = s.prewritten.removeValue(forKey: deliveries[i].id)!
                results.append(p.result)
                if let timeout = p.ackTimeout {
                    waits.append(AckWait(index: i, key: p.key, seq: p.seq, notificationID: deliveries[i].notificationID, frame: p.frame,
                                         timeout: timeout, needsFreshAck: p.ackedAhead))
                }
            }
            return Written(results: results, waits: waits)
        }
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
                if let p = s.prewritten.removeValue(forKey: d.id) {
                    results[i] = p.result
                    if let timeout = p.ackTimeout {
                        waits.append(AckWait(index: i, key: key, seq: p.seq, notificationID: d.notificationID, frame: p.frame, timeout: timeout,
                                             needsFreshAck: p.ackedAhead))
                    }
                    continue
                }
                guard let device = s.devices[key], !device.connections.isEmpty else {
                    results[i] = .notConnected(since: s.closedAt[key])
                    continue
                }
                let list = device.connections
                // Its ack timed out: not in the foreground until it acks again or reconnects.
                if s.unresponsive.contains(key) { continue }
                guard let orphan = device.orphans[d.notificationID] else {
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
                    device.orphans[d.notificationID] = nil
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
                let owner = d.user ?? s.devices[Key(app: d.app, device: d.streamKey)]?.connections.first?.user ?? ""
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
                if any { written += 1 } else { Self.keepNumber(&s, key: key, notificationID: entry.notificationID, seq: entry.seq, frame: frame) }
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
        guard let d = s.devices[key] else { return [] }
        return send(d, unresponsive: s.isUnresponsive(key), seq: seq, frame: frame)
    }

    /// ``send(_:key:seq:frame:)`` to a device already looked up.
    private static func send(_ d: Device, unresponsive: Bool, seq: Int64, frame: [UInt8]) -> [Connection] {
        if d.connections.isEmpty || unresponsive { return [] }
        var takers: [Connection] = []
        takers.reserveCapacity(d.connections.count)
        for c in d.connections {
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
        // By index, not by element: a `Delivery` is large, and copying each costs more than the look-up.
        let owners: [String?] = state.withLock { s in
            deliveries.indices.map { i in
                let key = Key(app: deliveries[i].app, device: deliveries[i].streamKey)
                guard deliveries[i].attempt == 1, let device = s.devices[key], let first = device.connections.first, !s.isUnresponsive(key),
                      device.orphans[deliveries[i].notificationID] == nil, s.prewritten[deliveries[i].id] == nil else { return nil }
                // A raw-token delivery has no user: the stream's owner is.
                return deliveries[i].user ?? first.user
            }
        }
        // One event per notification (a broadcast's batch is one notification).
        var last: (id: String, event: [UInt8])?
        return deliveries.indices.map { i in
            guard let owner = owners[i] else { return nil }
            let notificationID = deliveries[i].notificationID
            let event: [UInt8]
            if let last, last.id == notificationID { event = last.event } else {
                event = Self.eventJSON(deliveries[i])
                last = (notificationID, event)
            }
            return InboxEntry.New(app: deliveries[i].app, user: owner, device: deliveries[i].streamKey, notificationID: notificationID,
                                  event: event, createdAt: now)
        }
    }

    public func inboxMaxPerUser(_ app: String) -> Int { maxPerUser(app) }

    /// Writes the events numbered with their claim, in the devices' order (as ``write(_:)``
    /// does), and keeps each result for ``write(_:)`` of the same delivery. An event no stream
    /// took (its device closed meanwhile) keeps its number for the delivery's return.
    public func numbered(_ deliveries: [Delivery], entries: [InboxEntry?]) async {
        // Each event's device key (hashed once), its delivery and its frame.
        var work: [(key: Key, id: Int64, entry: InboxEntry)] = []
        work.reserveCapacity(entries.count)
        for i in entries.indices {
            if let e = entries[i] { work.append((Key(app: e.app, device: e.device), deliveries[i].id, e)) }
        }
        guard !work.isEmpty else { return }
        // Every device's order at once: a batch is thousands of devices, and the order lock then
        // costs nothing per device (the devices' own writes, rare, wait for it or it for them).
        let written = await deviceOrder.runAll { () -> Int in
            let now = clock.now
            // Framed outside the lock, one notification's data lines split once for all its streams.
            var lines: (id: String, bytes: [UInt8])?
            var frames: [[UInt8]] = []
            frames.reserveCapacity(work.count)
            for w in work {
                let data: [UInt8]
                if let lines, lines.id == w.entry.notificationID { data = lines.bytes } else {
                    data = ServerSentEvents.dataLines(w.entry.event)
                    lines = (w.entry.notificationID, data)
                }
                frames.append(ServerSentEvents.event(id: w.entry.seq, name: "notification", dataLines: data))
            }
            // The lock in slices: a claim's look-up, an ack or a close on the server thread waits
            // for one slice, not for the whole batch (the device lock keeps each device's order).
            var written = 0
            var start = 0
            while start < work.count {
                let end = min(start + Self.writesPerLock, work.count)
                written += state.withLock { s in
                    var written = 0
                    for i in start..<end {
                        let (key, id, e) = work[i]
                        let frame = frames[i]
                        let device = s.devices[key]
                        let takers = device.map { Self.send($0, unresponsive: s.isUnresponsive(key), seq: e.seq, frame: frame) } ?? []
                        let result: LocalWriteResult
                        if takers.isEmpty {
                            result = .notConnected(since: s.closedAt[key] ?? now)
                            Self.keepNumber(&s, key: key, notificationID: e.notificationID, seq: e.seq, frame: frame)
                        } else {
                            result = .written(id: e.seq)
                            written += 1
                        }
                        s.prewritten[id] = Prewritten(key: key, seq: e.seq, frame: frame, result: result,
                                                      ackTimeout: Self.ackTimeout(takers), ackedAhead: (device?.acked ?? 0) >= e.seq)
                    }
                    return written
                }
                start = end
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
            guard let d = s.devices[key], d.connections.contains(where: { $0.user == user }) else { return (.noStream, false) }
            let acked = max(d.acked ?? 0, id)
            d.acked = acked
            var revived = false
            if !s.unresponsive.isEmpty, s.unresponsive.remove(key) != nil {
                s.byUser[app, default: [:]][user, default: []].insert(device)
                opened(app, user, device)
                revived = true
            }
            // An event written after the device had acknowledged past it counts only with an
            // ack that arrived since (this one) and covers it.
            if !d.awaiting.isEmpty {
                d.awaiting.removeAll { e in
                    guard e.wait.seq <= acked && (!e.wait.needsFreshAck || id >= e.wait.seq) else { return false }
                    if e.batch.settle(e.wait.index, .acknowledged(id: e.wait.seq)) { complete.append(e.batch) }
                    return true
                }
            }
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
        return state.withLock { s in s.devices[key]?.awaiting.first { $0.wait.notificationID == notificationID }?.wait.seq }
    }

    /// An event written and not acknowledged keeps its number: when its delivery comes back (the
    /// device reconnected or acknowledged again), it is not numbered and sent a second time to a
    /// client that has it (see ``writeInOrder(_:)``'s orphans).
    private static func keepNumber(_ s: inout State, key: Key, notificationID: String, seq: Int64, frame: [UInt8]) {
        guard s.orphanCount < maxOrphans else { return }
        keepNumber(&s, s.device(key), notificationID: notificationID, seq: seq, frame: frame)
    }

    /// ``keepNumber(_:key:notificationID:seq:frame:)`` on a device already looked up.
    private static func keepNumber(_ s: inout State, _ d: Device, notificationID: String, seq: Int64, frame: [UInt8]) {
        guard d.orphans[notificationID] == nil, s.orphanCount < maxOrphans else { return }
        d.orphans[notificationID] = (seq, frame)
        s.orphanCount += 1
    }

    /// Waits until each write is acknowledged, its device has gone, or its ack timeout passed
    /// (the device then stops counting as present). A cancelled wait answers what was written.
    private func awaitAcks(_ waits: [AckWait]) async -> [Int: LocalWriteResult] {
        let batch = AckBatch()
        let start = clock.now
        state.withLock { s in
            var last: Device?
            for w in waits {
                let device = last?.key == w.key ? last : s.devices[w.key]
                if let acked = device?.acked, acked >= w.seq, !w.needsFreshAck {
                    batch.results[w.index] = .acknowledged(id: w.seq)
                } else if let device, !device.connections.isEmpty {
                    device.awaiting.append(AckEntry(batch: batch, wait: w, deadline: start.addingTimeInterval(w.timeout)))
                    if last !== device { batch.devices.append(device) }
                    last = device
                    batch.remaining += 1
                } else {
                    // It closed between the write and now.
                    Self.keepNumber(&s, key: w.key, notificationID: w.notificationID, seq: w.seq, frame: w.frame)
                    batch.results[w.index] = .notConnected(since: s.closedAt[w.key] ?? start)
                }
            }
        }
        while true {
            let now = clock.now
            let cancelled = Task.isCancelled
            var timedOut = 0
            let next: Date? = state.withLock { s in
                var next: Date?
                for d in batch.devices where !d.awaiting.isEmpty {
                    var late = 0
                    d.awaiting.removeAll { e in
                        guard e.batch === batch else { return false }
                        if cancelled {
                            _ = batch.settle(e.wait.index, .written(id: e.wait.seq))
                            return true
                        }
                        guard e.deadline <= now else {
                            next = min(next ?? e.deadline, e.deadline)
                            return false
                        }
                        late += 1
                        Self.keepNumber(&s, d, notificationID: e.wait.notificationID, seq: e.wait.seq, frame: e.wait.frame)
                        _ = batch.settle(e.wait.index, .notConnected(since: nil))
                        return true
                    }
                    timedOut += late
                    if late > 0 && !d.connections.isEmpty && s.devices[d.key] === d && s.unresponsive.insert(d.key).inserted {
                        // Frozen or unreachable: out of the foreground, here and for the other nodes.
                        let key = d.key
                        for c in d.connections {
                            s.byUser[key.app]?[c.user]?.remove(key.device)
                            if s.byUser[key.app]?[c.user]?.isEmpty == true { s.byUser[key.app]?[c.user] = nil }
                        }
                        closed(key.app, key.device)
                    }
                }
                if batch.remaining == 0 {
                    for d in batch.devices { s.forgetIfIdle(d) }
                    return nil
                }
                return next
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
                let device = s.devices[key]
                return (device?.connections.isEmpty == false, d.user ?? device?.connections.first?.user, device?.orphans[d.notificationID] != nil)
            }
            guard connected, !known, let owner,
                  let entry = try? await inbox.entry(app: d.app, user: owner, device: d.streamKey, notificationID: d.notificationID) else { continue }
            let frame = ServerSentEvents.event(id: entry.seq, name: "notification", data: entry.event)
            state.withLock { s in Self.keepNumber(&s, key: key, notificationID: d.notificationID, seq: entry.seq, frame: frame) }
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
