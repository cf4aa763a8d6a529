/// How long the client waits before it reconnects: exponential backoff with jitter, never
/// sooner than the server's `retry:` (or `Retry-After`).
///
/// The n-th reconnection in a row (`attempt` 0 after a connection that worked) waits a random
/// time in `[d, d × (1 + jitter)]` with `d = min(maximumDelay, base × multiplier^attempt)`, where
/// `base` is the server's last `retry:` when it sent one, else `initialDelay`. A `retry:` larger
/// than `maximumDelay` raises the cap to it: the server's wish is a floor, never cut.
public struct ReconnectPolicy: Sendable, Equatable {
    /// The first delay when the server sent no `retry:`. Default 1 s.
    public var initialDelay: Duration
    /// The longest delay before jitter. Default 60 s.
    public var maximumDelay: Duration
    /// Growth per failed attempt. Default 2.
    public var multiplier: Double
    /// The random part, a fraction of the delay added on top (0 for none). Default 0.5.
    public var jitter: Double

    /// Creates a policy.
    public init(initialDelay: Duration = .seconds(1), maximumDelay: Duration = .seconds(60), multiplier: Double = 2, jitter: Double = 0.5) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.multiplier = max(1, multiplier)
        self.jitter = max(0, jitter)
    }

    /// The delay before reconnection `attempt` (0-based).
    /// - Parameters:
    ///   - serverRetry: the reconnection time the server asked for (`retry:`), if any.
    ///   - retryAfter: a `Retry-After` the last answer carried, if any (a floor, like `retry:`).
    ///   - random: a value in `0..<1` (the client's injected random source).
    public func delay(attempt: Int, serverRetry: Duration? = nil, retryAfter: Duration? = nil, random: Double) -> Duration {
        let base = serverRetry ?? initialDelay
        let cap = max(maximumDelay, base)
        let grown = Self.seconds(base) * pow(multiplier, Double(max(0, min(attempt, 64))))
        var d = min(Self.seconds(cap), grown)
        if let retryAfter { d = max(d, Self.seconds(retryAfter)) }
        let r = min(max(random, 0), 1)
        // At most about 292 years, the range of Int64 nanoseconds.
        return .nanoseconds(Int64(min((d * (1 + jitter * r) * 1e9).rounded(.down), 9e18)))
    }

    /// The bounds ``delay(attempt:serverRetry:retryAfter:random:)`` stays within.
    public func bounds(attempt: Int, serverRetry: Duration? = nil, retryAfter: Duration? = nil) -> ClosedRange<Duration> {
        delay(attempt: attempt, serverRetry: serverRetry, retryAfter: retryAfter, random: 0)...delay(attempt: attempt, serverRetry: serverRetry, retryAfter: retryAfter, random: 1)
    }

    static func seconds(_ d: Duration) -> Double {
        let c = d.components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }

    private func pow(_ x: Double, _ n: Double) -> Double {
        var r = 1.0
        for _ in 0..<Int(n) { r *= x; if r > 1e12 { break } }
        return r
    }
}
