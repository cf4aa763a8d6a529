import FoundationEssentials

/// One attempt of a delivery on record: which route tried, when, what the platform answered,
/// and what Herald did next. The status API shows a delivery's attempts in order
/// (`GET /v1/notifications/{id}`, `history`); the queue keeps the last ``kept`` of them.
///
/// The delivery engine makes one with each outcome it records (``DeliveryCompletion/historyEntry``),
/// and the queue appends it in the same write as the state change.
public struct DeliveryAttempt: Sendable, Equatable {
    /// How many attempts a delivery keeps: the oldest go first.
    public static let kept = 20

    /// The route (transport) that made the attempt.
    public var route: String
    /// When the answer came (or the attempt ended without one).
    public var at: Date
    /// What the route reported, as a word: `delivered`, `retry`, `token_invalid`, `rejected`,
    /// `expired`, `setup_failure`, `not_connected`, `deferred`; `not_sent` when it never reached the route
    /// (its content could not be rendered, it had expired); `interrupted` for an attempt a
    /// restart cut short.
    public var outcome: String
    /// The platform's answer, its status and reason as the route gives them
    /// (`410 subscription gone`, `Unregistered`, `UNREGISTERED`); `nil` when there was none.
    public var answer: String?
    /// The platform's receipt (APNs's `apns-id`, FCM's message name), when it gave one.
    public var receipt: String?
    /// What Herald did next: `retry`, `fallback to <route>`, `retired device`
    /// (`retired device, fallback to <route>`), `parked`, `paused`, `sent again`, or the final
    /// state (`delivered`, `failed`, `rejected`, `expired`).
    public var next: String

    public init(route: String, at: Date, outcome: String, answer: String?, receipt: String? = nil, next: String) {
        self.route = route
        self.at = at
        self.outcome = outcome
        self.answer = answer
        self.receipt = receipt
        self.next = next
    }

    /// The record of `outcome` answered by `route` at `at`, followed by `action`.
    public init(route: String, at: Date, outcome: DeliveryOutcome, action: DeliveryAction) {
        var receipt: String? = nil
        if case .delivered(let r, _) = outcome { receipt = r }
        self.init(route: route, at: at, outcome: Self.word(outcome), answer: outcome.reason, receipt: receipt,
                  next: Self.next(action))
    }

    /// The word for what a transport reported (``outcome``).
    public static func word(_ outcome: DeliveryOutcome) -> String {
        switch outcome {
        case .delivered: return "delivered"
        case .retry: return "retry"
        case .tokenInvalid: return "token_invalid"
        case .rejected: return "rejected"
        case .expired: return "expired"
        case .setupFailure: return "setup_failure"
        case .notConnected: return "not_connected"
        case .deferred: return "deferred"
        }
    }

    /// What Herald did next, in words (``next``).
    public static func next(_ action: DeliveryAction) -> String {
        switch action {
        case .finish(let state, _): return state == .invalidToken ? "retired device" : state.rawValue
        case .retry: return "retry"
        case .invalidate: return "retired device"
        case .pause: return "paused"
        case .park: return "parked"
        case .reroute(let to, _): return "fallback to \(to)"
        case .postpone: return "postponed"
        }
    }

    /// The stored form: a JSON object with `at` in milliseconds since 1970.
    public var storedJSON: String {
        var w = JSONWriter(capacity: 160)
        w.object { o in
            o.string("route", route)
            o.int64("at", at.millisecondsSince1970)
            o.string("outcome", outcome)
            o.string("answer", answer)
            o.string("receipt", receipt)
            o.string("next", next)
        }
        return w.string
    }

    /// Reads a stored history (a JSON array of ``storedJSON`` objects); `[]` for `nil` (a delivery
    /// written before attempts were kept) and for entries it cannot read.
    public static func history(stored: String?) -> [DeliveryAttempt] {
        guard let stored, let array = (try? JSONValue.parse(stored))?.arrayValue else { return [] }
        return array.compactMap { v in
            guard let route = v["route"]?.stringValue, let ms = v["at"]?.doubleValue,
                  let outcome = v["outcome"]?.stringValue, let next = v["next"]?.stringValue else { return nil }
            return DeliveryAttempt(route: route, at: Date(millisecondsSince1970: Int64(ms)), outcome: outcome,
                                   answer: v["answer"]?.stringValue, receipt: v["receipt"]?.stringValue, next: next)
        }
    }

    /// Writes the attempt as the status API shows it (`at` in ISO 8601).
    public func write(into o: inout ObjectWriter) {
        o.string("route", route)
        o.string("at", at.iso8601)
        o.string("outcome", outcome)
        if let answer { o.string("answer", answer) } else { o.null("answer") }
        if let receipt { o.string("receipt", receipt) }
        o.string("next", next)
    }
}
