import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// A payload's bytes at a fixed address, handed to libcurl with `CURLOPT_POSTFIELDS` (which
/// does not copy them). One per notification in a batch, shared by its requests.
///
/// - Important: libcurl reads the bytes while the transfer is in the multi handle (its own
///   resends included). Each ``PendingRequest`` holds its payload, and an ``EasyHandle`` holds
///   its request until after `curl_multi_remove_handle` on every path (done, connection lost,
///   shutdown, a failed add); the next `prepare` points the handle at other bytes before it is
///   added again, and libcurl never reads the option of a handle outside the multi handle.
final class PayloadBytes: @unchecked Sendable {
    let count: Int
    let base: UnsafeMutableRawPointer
    /// The array the bytes were copied from (equal arrays of one notification share them).
    let source: [UInt8]

    init(_ bytes: [UInt8]) {
        count = bytes.count
        source = bytes
        base = .allocate(byteCount: max(bytes.count, 1), alignment: 1)
        bytes.withUnsafeBytes { if let from = $0.baseAddress { base.copyMemory(from: from, byteCount: $0.count) } }
    }

    deinit { base.deallocate() }

    /// Hands out one ``PayloadBytes`` per notification: its deliveries carry the same payload,
    /// so a campaign's batch copies it once.
    struct Cache {
        private var byNotification: [String: PayloadBytes] = [:]

        mutating func bytes(for delivery: Delivery) -> PayloadBytes {
            if let known = byNotification[delivery.notificationID], known.source == delivery.payload.body { return known }
            let fresh = PayloadBytes(delivery.payload.body)
            byNotification[delivery.notificationID] = fresh
            return fresh
        }
    }
}

/// One request waiting in, or in flight on, an engine (``APNsEngine``).
final class PendingRequest: @unchecked Sendable {
    let delivery: Delivery
    /// The body, kept alive (at a fixed address) until libcurl is done with the transfer.
    let payload: PayloadBytes
    let slot: Int
    let batch: BatchCompletion
    var shapeKey: HeaderShape.Key
    var token: ProviderTokenCache.Token?
    var retriesLeft: Int
    var refreshedToken = false
    /// Monotonic nanoseconds after which a request still waiting for a stream gives up.
    var waitDeadline: UInt64 = 0
    /// Monotonic nanoseconds when it was last handed to libcurl.
    var startedAt: UInt64 = 0

    init(delivery: Delivery, payload: PayloadBytes, slot: Int, batch: BatchCompletion,
         shapeKey: HeaderShape.Key, token: ProviderTokenCache.Token?, retries: Int) {
        self.delivery = delivery
        self.payload = payload
        self.slot = slot
        self.batch = batch
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
