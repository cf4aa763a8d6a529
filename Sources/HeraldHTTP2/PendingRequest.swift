import FoundationEssentials
import HeraldCore

/// The shared part of a request's headers: its method, the caller's shared list and what the
/// hooks added. Requests with equal keys (one notification's, one token's) share one encoding.
struct ShapeKey: Hashable {
    var method: String
    var headers: [HTTP2Header]
    var added: [HTTP2Header]
}

/// One request waiting in, or in flight on, an engine (``HTTP2ConnectionEngine``).
final class PendingRequest: @unchecked Sendable {
    /// The request; holds its body (at a fixed address) until libcurl or nghttp2 is done with it.
    let request: HTTP2Request
    let slot: Int
    let batch: BatchCompletion
    /// The headers ``HTTP2RequestHooks/willStart(_:)`` added to the current attempt.
    var added: [HTTP2Header] = []
    var retriesLeft: Int
    /// Attempts begun so far.
    var attempts = 0
    /// Resends the hooks asked for.
    var resends = 0
    /// Monotonic nanoseconds after which a request still waiting for a stream gives up.
    var waitDeadline: UInt64 = 0
    /// Monotonic nanoseconds when it was last handed to libcurl or nghttp2.
    var startedAt: UInt64 = 0

    init(request: HTTP2Request, slot: Int, batch: BatchCompletion, retries: Int) {
        self.request = request
        self.slot = slot
        self.batch = batch
        self.retriesLeft = retries
    }

    var shapeKey: ShapeKey { ShapeKey(method: request.method, headers: request.headers, added: added) }

    /// The current attempt, as hooks see it.
    var attempt: HTTP2Attempt {
        HTTP2Attempt(request: request, number: attempts, resends: resends, addedHeaders: added)
    }
}

/// Collects the results of one ``HTTP2Client/send(_:)`` and resumes its caller when all are in.
final class BatchCompletion: Sendable {
    private struct State {
        var results: [HTTP2Result?]
        var remaining: Int
        var continuation: CheckedContinuation<[HTTP2Result], Never>?
    }
    private let state: Locked<State>

    init(count: Int) {
        state = Locked(State(results: Array(repeating: nil, count: count), remaining: count, continuation: nil))
    }

    /// Waits for every slot.
    func wait() async -> [HTTP2Result] {
        await withCheckedContinuation { (c: CheckedContinuation<[HTTP2Result], Never>) in
            let done: [HTTP2Result]? = state.withLock { s in
                if s.remaining == 0 { return s.results.map { $0! } }
                s.continuation = c
                return nil
            }
            if let done { c.resume(returning: done) }
        }
    }

    /// Sets a slot's result (the first one set wins).
    func complete(_ slot: Int, _ result: HTTP2Result) {
        let finished: (CheckedContinuation<[HTTP2Result], Never>, [HTTP2Result])? = state.withLock { s in
            guard s.results[slot] == nil else { return nil }
            s.results[slot] = result
            s.remaining -= 1
            guard s.remaining == 0, let c = s.continuation else { return nil }
            s.continuation = nil
            return (c, s.results.map { $0! })
        }
        if let (c, results) = finished { c.resume(returning: results) }
    }
}
