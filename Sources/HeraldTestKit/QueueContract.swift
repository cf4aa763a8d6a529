import Foundation
import HeraldAPNs
import HeraldCore

/// Behaviour every ``DeliveryQueue`` must share, as scenarios that return what went wrong (empty
/// when the queue behaves), so core tests (the in-memory queue) and the storage contract tests
/// (SQLite, PostgreSQL) run the same steps.
public enum QueueContract {
    /// When the scenarios' notifications are accepted.
    static let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    /// A notification of `deliveries`, accepted at ``t0``.
    static func notification(_ deliveries: [PlannedDelivery], alert: String = "hi") -> QueuedNotification {
        QueuedNotification(id: UUIDSource.timeOrdered().lowercasedString, app: "app", topic: "app",
                           content: NotificationContent(alert: .text(alert)), idempotencyKey: nil, createdAt: t0, deliveries: deliveries)
    }

    /// Park a local delivery, unpark it when its device connects, reroute it to its fallback.
    /// - Parameter exactDepth: check ``DeliveryQueue/depth()`` (PostgreSQL refreshes it from the
    ///   database every second, so it may count a change twice for a moment).
    public static func parkUnparkAndReroute(_ queue: any DeliveryQueue, exactDepth: Bool = true) async throws -> [String] {
        var problems: [String] = []
        func check(_ ok: Bool, _ what: String) { if !ok { problems.append(what) } }
        let t0 = Self.t0, lease = t0.addingTimeInterval(60)
        let n = Self.notification([PlannedDelivery(token: "ab01", user: "alice", transport: "live", messageID: UUIDSource.random(), fallback: "push")])
        let receipt = try await queue.enqueue(n, idempotencySince: .distantPast)
        var claimed = try await queue.claim(transport: "live", limit: 10, now: t0, leaseUntil: lease)
        check(claimed.map(\.delivery.fallback) == ["push"], "the claim carries the fallback: \(claimed.map(\.delivery.fallback))")
        guard let first = claimed.first else { return problems + ["nothing claimed"] }
        try await queue.complete([.parked(first.delivery, until: t0.addingTimeInterval(3600), reason: "in the inbox")], now: t0)
        let early = try await queue.claim(transport: "live", limit: 10, now: t0.addingTimeInterval(1), leaseUntil: lease)
        check(early.isEmpty, "a parked delivery is not due before its time")
        let states = try await queue.status(notificationID: receipt.id)?.deliveries.map(\.state)
        check(states == nil || states == [.parked], "reported parked: \(String(describing: states))")
        check(try await queue.unpark(transport: "live", token: "ab01", now: t0.addingTimeInterval(2)) == 1, "unpark finds the device's delivery")
        check(try await queue.unpark(transport: "live", token: "cd02", now: t0.addingTimeInterval(2)) == 0, "unpark leaves other devices alone")
        claimed = try await queue.claim(transport: "live", limit: 10, now: t0.addingTimeInterval(2), leaseUntil: lease)
        check(claimed.map(\.delivery.attempt) == [1], "due after unpark, the parked attempt given back: \(claimed.map(\.delivery.attempt))")
        guard let second = claimed.first else { return problems + ["nothing claimed after unpark"] }
        try await queue.complete([.rerouted(second.delivery, to: "push", at: t0.addingTimeInterval(3), reason: "not connected")],
                                 now: t0.addingTimeInterval(3))
        let none = try await queue.claim(transport: "live", limit: 10, now: t0.addingTimeInterval(4), leaseUntil: lease)
        check(none.isEmpty, "a rerouted delivery leaves its transport")
        claimed = try await queue.claim(transport: "push", limit: 10, now: t0.addingTimeInterval(4), leaseUntil: lease)
        check(claimed.map(\.delivery.transport) == ["push"], "claimed by the fallback transport: \(claimed.map(\.delivery.transport))")
        check(claimed.map(\.delivery.fallback) == [nil], "a fallback is used once")
        check(claimed.map(\.delivery.attempt) == [1], "the reroute does not count an attempt")
        if exactDepth {
            check(queue.depth()["push"]?.inFlight == 1, "depth follows the reroute: \(queue.depth())")
            check((queue.depth()["live"]?.backlog ?? 0) == 0, "nothing left on live: \(queue.depth())")
        }
        return problems
    }

    /// A browser's subscription linked to its stream device (``Delivery/streamDevice``): the
    /// field survives the queue (claims, a reroute), the device's stream unparks it by that
    /// device and not by its token, and a delivery without one is still unparked by its token.
    public static func streamDeviceIsKeptAndUnparksByIt(_ queue: any DeliveryQueue) async throws -> [String] {
        var problems: [String] = []
        func check(_ ok: Bool, _ what: String) { if !ok { problems.append(what) } }
        let t0 = Self.t0, lease = t0.addingTimeInterval(60)
        let n = Self.notification([PlannedDelivery(token: "subscription-1", user: "alice", transport: "web",
                                                   messageID: UUIDSource.random(), fallback: "live", streamDevice: "tab01"),
                                   PlannedDelivery(token: "tab02", user: "alice", transport: "live", messageID: UUIDSource.random())])
        _ = try await queue.enqueue(n, idempotencySince: .distantPast)
        var claimed = try await queue.claim(transport: "web", limit: 10, now: t0, leaseUntil: lease)
        check(claimed.map(\.delivery.streamDevice) == ["tab01"], "the claim carries the stream device: \(claimed.map(\.delivery.streamDevice))")
        guard let push = claimed.first else { return problems + ["nothing claimed on web"] }
        // The Web Push failed: its fallback (the local route) takes it, still linked.
        try await queue.complete([.rerouted(push.delivery, to: "live", at: t0, reason: "gone")], now: t0)
        claimed = try await queue.claim(transport: "live", limit: 10, now: t0, leaseUntil: lease)
        check(Set(claimed.map(\.delivery.streamKey)) == ["tab01", "tab02"], "stream keys after the reroute: \(claimed.map(\.delivery.streamKey))")
        check(claimed.first { $0.delivery.streamDevice != nil }?.delivery.token == "subscription-1", "the token stays the subscription")
        try await queue.complete(claimed.map { .parked($0.delivery, until: t0.addingTimeInterval(3600), reason: "in the inbox") }, now: t0)
        check(try await queue.unpark(transport: "live", token: "subscription-1", now: t0.addingTimeInterval(1)) == 0,
              "unparked by its token, which no stream is keyed by")
        check(try await queue.unpark(transport: "live", token: "tab01", now: t0.addingTimeInterval(1)) == 1, "unpark finds the linked delivery by its stream device")
        check(try await queue.unpark(transport: "live", token: "tab02", now: t0.addingTimeInterval(1)) == 1, "unpark finds a plain delivery by its token")
        claimed = try await queue.claim(transport: "live", limit: 10, now: t0.addingTimeInterval(1), leaseUntil: lease)
        check(Set(claimed.map(\.delivery.streamKey)) == ["tab01", "tab02"], "both due after unpark: \(claimed.map(\.delivery.streamKey))")
        return problems
    }

    /// Three parked deliveries of one user and one of another, bound to two per user: the
    /// user's oldest ends expired, the rest stay parked.
    public static func parkedBeyondTheBoundExpire(_ queue: any DeliveryQueue) async throws -> [String] {
        var problems: [String] = []
        let t0 = Date(timeIntervalSince1970: 1_767_225_600)
        var ids: [String] = []
        for (i, user) in ["ann", "ann", "ann", "bob"].enumerated() {
            let n = QueuedNotification(id: UUIDSource.timeOrdered().lowercasedString, app: "app", topic: "app",
                                       content: NotificationContent(alert: .text("m\(i)")), idempotencyKey: nil, createdAt: t0,
                                       deliveries: [PlannedDelivery(token: "ab0\(i)", user: user, transport: "live",
                                                                    messageID: UUIDSource.random())])
            ids.append(try await queue.enqueue(n, idempotencySince: .distantPast).id)
            let claimed = try await queue.claim(transport: "live", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(60))
            try await queue.complete(claimed.map { .parked($0.delivery, until: t0.addingTimeInterval(3600), reason: "in the inbox") }, now: t0)
        }
        let expired = try await queue.expireParked(transport: "live", app: "app", keepPerUser: 2, now: t0.addingTimeInterval(1))
        if expired != 1 { problems.append("expired \(expired), expected 1") }
        if try await queue.expireParked(transport: "live", app: "other", keepPerUser: 0, now: t0) != 0 { problems.append("another app's bound touched this app") }
        var states: [DeliveryState?] = []
        for id in ids { states.append(try await queue.status(notificationID: id)?.deliveries.first?.state) }
        // The in-memory queue forgets final deliveries (nil); the durable ones report them.
        let first = states[0]
        if !(first == .expired || first == nil) { problems.append("the oldest is \(String(describing: first)), expected expired") }
        if Array(states.dropFirst()) != [.parked, .parked, .parked] { problems.append("the others: \(states.dropFirst())") }
        return problems
    }

    /// Every attempt on record: a Web Push 410 handed to the local route and parked shows both
    /// attempts in order (route, time, answer, next step); a stale claim's completion appends
    /// nothing; a delivery tried more than ``DeliveryAttempt/kept`` times keeps only its last ones.
    public static func attemptsAreKeptInOrderAndBounded(_ queue: any DeliveryQueue) async throws -> [String] {
        var problems: [String] = []
        func check(_ ok: Bool, _ what: String) { if !ok { problems.append(what) } }
        let t0 = Self.t0, lease = t0.addingTimeInterval(60)
        let n = Self.notification([PlannedDelivery(token: "sub-1", user: "alice", transport: "web", messageID: UUIDSource.random(), fallback: "live")])
        let receipt = try await queue.enqueue(n, idempotencySince: .distantPast)
        var claimed = try await queue.claim(transport: "web", limit: 10, now: t0, leaseUntil: lease)
        guard let web = claimed.first else { return ["nothing claimed on web"] }
        let gone = DeliveryAttempt(route: "web", at: t0.addingTimeInterval(1), outcome: "token_invalid",
                                   answer: "410 subscription gone: push subscription has unsubscribed or expired", next: "retired device, fallback to live")
        try await queue.complete([.rerouted(web.delivery, to: "live", at: t0.addingTimeInterval(1), reason: "410 subscription gone; kept for live")
            .recording(gone)], now: t0.addingTimeInterval(1))
        claimed = try await queue.claim(transport: "live", limit: 10, now: t0.addingTimeInterval(1), leaseUntil: lease)
        guard let live = claimed.first else { return problems + ["nothing claimed on live after the fallback"] }
        let parked = DeliveryAttempt(route: "live", at: t0.addingTimeInterval(2), outcome: "not_connected", answer: "device not connected", next: "parked")
        try await queue.complete([.parked(live.delivery, until: t0.addingTimeInterval(3600), reason: "in the inbox").recording(parked)],
                                 now: t0.addingTimeInterval(2))
        // A late answer to the first claim is fenced off, and so is its history entry.
        try await queue.complete([.finished(web.delivery, .failed, reason: "late")
            .recording(DeliveryAttempt(route: "web", at: t0.addingTimeInterval(3), outcome: "retry", answer: "late", next: "failed"))],
                                 now: t0.addingTimeInterval(3))
        let first = try await queue.status(notificationID: receipt.id)?.deliveries.first
        check(first?.state == .parked, "parked after the fallback: \(String(describing: first?.state))")
        check(first?.history == [gone, parked], "the 410 and the park, in order: \(String(describing: first?.history))")

        // Tried more often than the bound: the oldest attempts go.
        let many = Self.notification([PlannedDelivery(token: "ab09", user: "bob", transport: "web", messageID: UUIDSource.random())])
        let manyReceipt = try await queue.enqueue(many, idempotencySince: .distantPast)
        var at = t0
        let tries = DeliveryAttempt.kept + 5
        for i in 1...tries {
            let c = try await queue.claim(transport: "web", limit: 10, now: at, leaseUntil: at.addingTimeInterval(60))
            guard let d = c.first else { return problems + ["nothing claimed on try \(i)"] }
            at = at.addingTimeInterval(1)
            try await queue.complete([.requeued(d.delivery, at: at, reason: "503 push service error")
                .recording(DeliveryAttempt(route: "web", at: at, outcome: "retry", answer: "503 try \(i)", next: "retry"))], now: at)
        }
        let history = try await queue.status(notificationID: manyReceipt.id)?.deliveries.first?.history ?? []
        check(history.count == DeliveryAttempt.kept, "kept \(history.count) attempts, expected \(DeliveryAttempt.kept)")
        check(history.map(\.answer) == (tries - DeliveryAttempt.kept + 1...tries).map { "503 try \($0)" },
              "the last attempts, oldest first: \(history.map(\.answer))")
        return problems
    }
}
