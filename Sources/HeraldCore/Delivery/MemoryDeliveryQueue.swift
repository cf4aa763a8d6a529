import FoundationEssentials
import Glibc

/// A ``DeliveryQueue`` in memory, for `herald send`: the same ``TransportWorker`` drives it as
/// drives the daemon's durable queue, so the CLI retries, expires and invalidates exactly as
/// the daemon does.
///
/// A delivery leaves the queue when it reaches a final state: ``onFinal`` gets its report and
/// nothing of it is kept, so memory is bounded by the unfinished deliveries (the sender can
/// hold back with ``waitForRoom(below:)``). Nothing survives the process: there are no
/// interrupted claims to settle.
public final class MemoryDeliveryQueue: DeliveryQueue {
    /// Called once per delivery, as soon as it is final.
    public typealias FinalHandler = @Sendable (DeliveryReport) -> Void

    private final class Note: Sendable {
        let id: String
        let app: String
        let topic: String
        let content: NotificationContent
        let createdAt: Date

        init(id: String, app: String, topic: String, content: NotificationContent, createdAt: Date) {
            self.id = id
            self.app = app
            self.topic = topic
            self.content = content
            self.createdAt = createdAt
        }
    }

    private struct Row {
        var note: Note
        var token: String
        var user: String?
        var transport: String
        var messageID: UUID
        var receipt: String? = nil
        var attempts = 0
        var state = DeliveryState.queued
        var due: Date
        var reason: String?
        var leaseUntil: Date?
        var updatedAt: Date
        var fallback: String?
        var streamDevice: String? = nil
        /// The last ``DeliveryAttempt/kept`` attempts.
        var history: [DeliveryAttempt] = []
    }

    /// One transport's waiting deliveries: those due at once in arrival order, and retries by time.
    private struct Lane {
        var ready: [Int64] = []
        var head = 0
        /// Sorted by due time.
        var later: [(due: Date, id: Int64)] = []

        mutating func schedule(_ id: Int64, at due: Date) {
            var lo = later.startIndex, hi = later.endIndex
            while lo < hi {
                let mid = (lo + hi) / 2
                if later[mid].due <= due { lo = mid + 1 } else { hi = mid }
            }
            later.insert((due, id), at: lo)
        }
    }

    private struct State {
        var rows: [Int64: Row] = [:]
        var nextID: Int64 = 1
        var lanes: [String: Lane] = [:]
        var depth: [String: QueueDepth] = [:]
        var waiters: [(below: Int, continuation: CheckedContinuation<Void, Never>)] = []
        /// Transports given up on, with the reason: a delivery of theirs that comes back to the
        /// queue ends `failed` instead.
        var abandoned: [String: String] = [:]
        var closed = false
    }

    private let state = Locked(State())
    private let onFinal: FinalHandler
    private let onEnqueue: @Sendable (Set<String>) -> Void

    /// - Parameters:
    ///   - onFinal: gets each delivery's report once it is final.
    ///   - onEnqueue: told which transports have new deliveries (wake their workers).
    public init(onFinal: @escaping FinalHandler, onEnqueue: @escaping @Sendable (Set<String>) -> Void = { _ in }) {
        self.onFinal = onFinal
        self.onEnqueue = onEnqueue
    }

    /// Deliveries not yet final.
    public var unfinished: Int { state.withLock { $0.rows.count } }

    /// Returns once fewer than `n` deliveries are unfinished (at once when there are).
    public func waitForRoom(below n: Int) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { s in
                if s.rows.count < n { return true }
                s.waiters.append((n, c))
                return false
            }
            if now { c.resume() }
        }
    }

    /// Returns once every delivery is final.
    public func drained() async { await waitForRoom(below: 1) }

    /// Ends every waiting delivery of `transport` as `failed` with `reason` (the CLI's answer to
    /// a transport that paused: nobody is there to fix it). Claimed ones finish as they are
    /// answered, or as `failed` with `reason` if they would come back to the queue. Returns the
    /// reports it gave ``onFinal``.
    @discardableResult
    public func abandon(transport: String, reason: String) -> [DeliveryReport] {
        let reports: [DeliveryReport] = state.withLock { s in
            s.abandoned[transport] = reason
            let ids = s.rows.filter { $0.value.transport == transport && $0.value.state == .queued }.map(\.key).sorted()
            s.lanes[transport] = Lane()
            var reports: [DeliveryReport] = []
            for id in ids {
                guard let row = s.rows.removeValue(forKey: id) else { continue }
                s.depth[transport, default: QueueDepth()].queued -= 1
                reports.append(DeliveryReport(token: row.token, user: row.user, transport: transport, outcome: .failed,
                                              reason: reason, attempts: row.attempts, messageID: row.messageID.lowercasedString))
            }
            return reports
        }
        reports.forEach(onFinal)
        releaseWaiters()
        return reports
    }

    private func releaseWaiters() {
        let ready: [CheckedContinuation<Void, Never>] = state.withLock { s in
            let count = s.rows.count
            let due = s.waiters.filter { count < $0.below }.map(\.continuation)
            s.waiters.removeAll { count < $0.below }
            return due
        }
        for c in ready { c.resume() }
    }

    // MARK: DeliveryQueue

    public var waitingAccepts: Int { 0 }

    public func enqueue(_ n: QueuedNotification, idempotencySince: Date) async throws -> EnqueueReceipt {
        let note = Note(id: n.id, app: n.app, topic: n.topic, content: n.content, createdAt: n.createdAt)
        var transports = Set<String>()
        let finals: [DeliveryReport] = try state.withLock { s in
            if s.closed { throw StoreError("the queue is closed") }
            var finals: [DeliveryReport] = []
            for d in n.deliveries {
                guard d.state == .queued, let transport = d.transport else {
                    finals.append(DeliveryReport(token: d.token, user: d.user, transport: d.transport, outcome: d.state,
                                                 reason: d.reason, attempts: 0, messageID: nil))
                    continue
                }
                if let reason = s.abandoned[transport] {
                    finals.append(DeliveryReport(token: d.token, user: d.user, transport: transport, outcome: .failed,
                                                 reason: reason, attempts: 0, messageID: nil))
                    continue
                }
                let id = s.nextID
                s.nextID += 1
                s.rows[id] = Row(note: note, token: d.token, user: d.user, transport: transport,
                                 messageID: d.messageID, due: n.createdAt, updatedAt: n.createdAt, fallback: d.fallback,
                                 streamDevice: d.streamDevice)
                s.lanes[transport, default: Lane()].ready.append(id)
                transports.insert(transport)
                s.depth[transport, default: QueueDepth()].queued += 1
            }
            return finals
        }
        finals.forEach(onFinal)
        if !transports.isEmpty { onEnqueue(transports) }
        return EnqueueReceipt(id: n.id, deliveries: n.deliveries.count, replayed: false)
    }

    /// Idempotency keys are the daemon's: an in-memory queue keeps none.
    public func receipt(app: String, idempotencyKey: String, since: Date) async throws -> EnqueueReceipt? { nil }

    public func claim(transport: String, limit: Int, now: Date, leaseUntil: Date) async throws -> [ClaimedDelivery] {
        try state.withLock { s in
            if s.closed { throw StoreError("the queue is closed") }
            guard var lane = s.lanes[transport] else { return [] }
            var claimed: [ClaimedDelivery] = []
            func take(_ id: Int64, due: Date? = nil) {
                // A `later` entry is stale when the row was rescheduled since (unparked).
                guard var row = s.rows[id], row.state == .queued || row.state == .parked, due.map({ $0 == row.due }) ?? true else { return }
                row.state = .sent
                row.attempts += 1
                row.leaseUntil = leaseUntil
                row.updatedAt = now
                s.rows[id] = row
                claimed.append(ClaimedDelivery(delivery: Delivery(
                    id: id, notificationID: row.note.id, app: row.note.app, topic: row.note.topic, token: row.token, user: row.user,
                    transport: transport, attempt: row.attempts, messageID: row.messageID,
                    content: row.note.content, fallback: row.fallback, streamDevice: row.streamDevice), acceptedAt: row.note.createdAt))
            }
            var dueLater = 0
            while dueLater < lane.later.count, lane.later[dueLater].due <= now, claimed.count < limit {
                take(lane.later[dueLater].id, due: lane.later[dueLater].due)
                dueLater += 1
            }
            lane.later.removeFirst(dueLater)
            while lane.head < lane.ready.count, claimed.count < limit {
                take(lane.ready[lane.head])
                lane.head += 1
            }
            if lane.head > 1024 && lane.head * 2 > lane.ready.count {
                lane.ready.removeFirst(lane.head)
                lane.head = 0
            }
            s.lanes[transport] = lane
            s.depth[transport, default: QueueDepth()].queued -= claimed.count
            s.depth[transport, default: QueueDepth()].inFlight += claimed.count
            return claimed
        }
    }

    public func unpark(transport: String, token: String, now: Date) async throws -> Int {
        let n: Int = state.withLock { s in
            var n = 0
            for (id, row) in s.rows where row.state == .parked && row.transport == transport && (row.streamDevice ?? row.token) == token {
                s.rows[id]?.due = now
                s.lanes[transport, default: Lane()].schedule(id, at: now)
                n += 1
            }
            return n
        }
        if n > 0 { onEnqueue([transport]) }
        return n
    }

    /// Nothing outlives the process.
    public func interrupted(transport: String) async throws -> [ClaimedDelivery] { [] }

    public func complete(_ completions: [DeliveryCompletion], now: Date) async throws {
        let reports: [DeliveryReport] = state.withLock { s in
            var reports: [DeliveryReport] = []
            for c in completions {
                guard var row = s.rows[c.id], row.state == .sent, row.attempts == c.attempt else { continue }
                s.depth[row.transport, default: QueueDepth()].inFlight -= 1
                if let entry = c.historyEntry {
                    if row.history.count >= DeliveryAttempt.kept { row.history.removeFirst(row.history.count - DeliveryAttempt.kept + 1) }
                    row.history.append(entry)
                }
                if c.state == .queued, let reason = s.abandoned[row.transport] {
                    s.rows[c.id] = nil
                    reports.append(DeliveryReport(token: row.token, user: row.user, transport: row.transport, outcome: .failed,
                                                  reason: reason, attempts: row.attempts - (c.countsAttempt ? 0 : 1), messageID: row.messageID.lowercasedString))
                } else if c.state == .queued || c.state == .parked {
                    row.state = c.state
                    if !c.countsAttempt { row.attempts -= 1 }
                    if let next = c.transport {
                        row.transport = next
                        row.fallback = nil
                    }
                    row.due = c.retryAt ?? now
                    row.reason = c.reason
                    row.leaseUntil = nil
                    row.updatedAt = now
                    s.rows[c.id] = row
                    s.lanes[row.transport, default: Lane()].schedule(c.id, at: row.due)
                    s.depth[row.transport, default: QueueDepth()].queued += 1
                } else {
                    s.rows[c.id] = nil
                    let receipt = c.state == .delivered ? (c.receipt ?? row.receipt) : nil
                    reports.append(DeliveryReport(token: row.token, user: row.user, transport: row.transport, outcome: c.state,
                                                  reason: c.reason, attempts: row.attempts, messageID: row.messageID.lowercasedString,
                                                  receipt: receipt))
                }
            }
            return reports
        }
        reports.forEach(onFinal)
        if !reports.isEmpty { releaseWaiters() }
    }

    public func renewLeases(_ claims: [ClaimedDelivery], until: Date) async throws {
        state.withLock { s in
            for c in claims where s.rows[c.delivery.id]?.attempts == c.delivery.attempt && s.rows[c.delivery.id]?.state == .sent {
                s.rows[c.delivery.id]?.leaseUntil = until
            }
        }
    }

    public func expireParked(transport: String, app: String, keepPerUser: Int, now: Date) async throws -> Int {
        let reports: [DeliveryReport] = state.withLock { s in
            let parked = s.rows.filter { $0.value.state == .parked && $0.value.transport == transport && $0.value.note.app == app }
            var reports: [DeliveryReport] = []
            for (_, rows) in Dictionary(grouping: parked, by: { $0.value.user ?? "" }) {
                for (id, row) in rows.sorted(by: { $0.key > $1.key }).dropFirst(max(0, keepPerUser)) {
                    s.rows[id] = nil
                    s.depth[transport, default: QueueDepth()].queued -= 1
                    reports.append(DeliveryReport(token: row.token, user: row.user, transport: transport, outcome: .expired,
                                                  reason: Self.inboxFull(keepPerUser), attempts: row.attempts, messageID: row.messageID.lowercasedString))
                }
            }
            return reports
        }
        reports.forEach(onFinal)
        if !reports.isEmpty { releaseWaiters() }
        return reports.count
    }

    /// The reason of a parked delivery that the inbox's size bound ended.
    public static func inboxFull(_ keep: Int) -> String { "the user's inbox holds at most \(keep) (inbox.maxPerUser); newer ones were kept" }

    public func reclaimExpiredLeases(now: Date) async throws -> Int {
        state.withLock { s in
            let expired = s.rows.filter { $0.value.state == .sent && ($0.value.leaseUntil ?? .distantFuture) <= now }.map(\.key).sorted()
            for id in expired {
                guard var row = s.rows[id] else { continue }
                row.state = .queued
                row.due = now
                row.leaseUntil = nil
                row.reason = "lease expired before the transport answered"
                s.rows[id] = row
                s.lanes[row.transport, default: Lane()].schedule(id, at: now)
                s.depth[row.transport, default: QueueDepth()].queued += 1
                s.depth[row.transport, default: QueueDepth()].inFlight -= 1
            }
            return expired.count
        }
    }

    public func nextDue(transport: String) async throws -> Date? {
        state.withLock { s in
            guard let lane = s.lanes[transport] else { return nil }
            if lane.head < lane.ready.count { return .distantPast }
            return lane.later.first?.due
        }
    }

    /// The deliveries of a notification that are not final yet (final ones went to ``onFinal``).
    public func status(notificationID: String) async throws -> NotificationStatus? {
        state.withLock { s in
            let rows = s.rows.filter { $0.value.note.id == notificationID }.sorted { $0.key < $1.key }
            guard let first = rows.first?.value else { return nil }
            return NotificationStatus(id: notificationID, app: first.note.app, createdAt: first.note.createdAt, idempotencyKey: nil,
                                      deliveries: rows.map { id, r in
                                          DeliveryStatus(id: id, token: r.token, user: r.user, transport: r.transport, state: r.state,
                                                         attempts: r.attempts, lastReason: r.reason, messageID: r.messageID.lowercasedString, receipt: r.receipt,
                                                         updatedAt: r.updatedAt, nextAttemptAt: r.state == .queued || r.state == .parked ? r.due : nil,
                                                         history: r.history)
                                      })
        }
    }

    public func depth() -> [String: QueueDepth] { state.withLock { $0.depth } }

    /// Final deliveries are not kept, so there is nothing to prune.
    public func prune(createdBefore cutoff: Date) async throws -> Int { 0 }

    public func ping() async throws {
        if state.withLock({ $0.closed }) { throw StoreError("the queue is closed") }
    }

    public func close() async {
        state.withLock { $0.closed = true }
    }
}
