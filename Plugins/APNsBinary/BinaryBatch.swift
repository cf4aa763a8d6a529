import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// Collects one `deliver` call's outcomes, slot by slot, from any thread; the caller awaits them all.
final class BinaryBatch: @unchecked Sendable {
    private let lock = ConditionLock()
    private var outcomes: [DeliveryOutcome?]
    private var remaining: Int
    private var continuation: CheckedContinuation<[DeliveryOutcome], Never>?

    init(count: Int) {
        outcomes = Array(repeating: nil, count: count)
        remaining = count
    }

    /// Records slot's outcome; the first outcome for a slot wins.
    func complete(_ slot: Int, _ outcome: DeliveryOutcome) {
        let resume: (CheckedContinuation<[DeliveryOutcome], Never>, [DeliveryOutcome])? = lock.withLock {
            guard outcomes[slot] == nil else { return nil }
            outcomes[slot] = outcome
            remaining -= 1
            guard remaining == 0, let c = continuation else { return nil }
            continuation = nil
            return (c, outcomes.map { $0! })
        }
        if let (c, all) = resume { c.resume(returning: all) }
    }

    /// Records one outcome for many slots under one lock (a proof settles thousands at once).
    func complete(_ frames: some Collection<BinaryFrame>, _ outcome: DeliveryOutcome) {
        let resume: (CheckedContinuation<[DeliveryOutcome], Never>, [DeliveryOutcome])? = lock.withLock {
            for f in frames where outcomes[f.slot] == nil {
                outcomes[f.slot] = outcome
                remaining -= 1
            }
            guard remaining == 0, let c = continuation else { return nil }
            continuation = nil
            return (c, outcomes.map { $0! })
        }
        if let (c, all) = resume { c.resume(returning: all) }
    }

    /// Waits until every slot has its outcome.
    func wait() async -> [DeliveryOutcome] {
        await withCheckedContinuation { (c: CheckedContinuation<[DeliveryOutcome], Never>) in
            let done: [DeliveryOutcome]? = lock.withLock {
                if remaining == 0 { return outcomes.map { $0! } }
                continuation = c
                return nil
            }
            if let done { c.resume(returning: done) }
        }
    }
}

/// One notification on its way through a gateway connection.
struct BinaryFrame: Sendable {
    let batch: BinaryBatch
    let slot: Int
    /// The 32 token bytes.
    let token: [UInt8]
    let payload: [UInt8]
    /// UNIX seconds; 0: do not store.
    let expiry: UInt32
    /// 10 or 5.
    let priority: UInt8
    /// Connections that were lost while this frame was written but not proven.
    var losses = 0
    /// Written alone and proven at once (after a `simple` connection failed without saying which).
    var isolate = false

    func complete(_ outcome: DeliveryOutcome) { batch.complete(slot, outcome) }
}

extension Collection<BinaryFrame> {
    /// Gives every frame `outcome`, one lock per run of frames from the same batch.
    func complete(_ outcome: DeliveryOutcome) {
        var start = startIndex
        while start != endIndex {
            let batch = self[start].batch
            var end = index(after: start)
            while end != endIndex && self[end].batch === batch { formIndex(after: &end) }
            batch.complete(self[start..<end], outcome)
            start = end
        }
    }
}
