import FoundationEssentials
import Glibc
import HeraldCore

/// One request waiting in, or in flight on, a ``CurlEngine``.
final class PendingRequest: @unchecked Sendable {
    let delivery: Delivery
    let slot: Int
    let batch: BatchCompletion
    let url: String
    var shapeKey: HeaderShape.Key
    var token: ProviderTokenCache.Token?
    var retriesLeft: Int
    var refreshedToken = false
    /// Monotonic nanoseconds after which a request still waiting for a stream gives up.
    var waitDeadline: UInt64 = 0

    init(delivery: Delivery, slot: Int, batch: BatchCompletion, url: String, shapeKey: HeaderShape.Key,
         token: ProviderTokenCache.Token?, retries: Int) {
        self.delivery = delivery
        self.slot = slot
        self.batch = batch
        self.url = url
        self.shapeKey = shapeKey
        self.token = token
        self.retriesLeft = retries
    }
}

/// Collects the outcomes of one `deliver` call and resumes its caller when all are in.
final class BatchCompletion: Sendable {
    private struct State {
        var outcomes: [DeliveryOutcome?]
        var remaining: Int
        var continuation: CheckedContinuation<[DeliveryOutcome], Never>?
    }
    private let state: Locked<State>

    init(count: Int) {
        state = Locked(State(outcomes: Array(repeating: nil, count: count), remaining: count, continuation: nil))
    }

    /// Waits for every slot.
    func wait() async -> [DeliveryOutcome] {
        await withCheckedContinuation { (c: CheckedContinuation<[DeliveryOutcome], Never>) in
            let done: [DeliveryOutcome]? = state.withLock { s in
                if s.remaining == 0 { return s.outcomes.map { $0! } }
                s.continuation = c
                return nil
            }
            if let done { c.resume(returning: done) }
        }
    }

    func complete(_ slot: Int, _ outcome: DeliveryOutcome) {
        let finished: (CheckedContinuation<[DeliveryOutcome], Never>, [DeliveryOutcome])? = state.withLock { s in
            guard s.outcomes[slot] == nil else { return nil }
            s.outcomes[slot] = outcome
            s.remaining -= 1
            guard s.remaining == 0, let c = s.continuation else { return nil }
            s.continuation = nil
            return (c, s.outcomes.map { $0! })
        }
        if let (c, outcomes) = finished { c.resume(returning: outcomes) }
    }
}
