/// How long the client waits before it reconnects: exponential backoff with full jitter across
/// the server's `retry:`, and never before a `Retry-After`.
///
/// The n-th reconnection in a row (`attempt` 0 after a connection that worked) waits a random
/// time in `[w × (1 − jitter), w]` with the window `w = min(maximumDelay, base × multiplier^attempt)`,
/// where `base` is the server's last `retry:` when it sent one, else `initialDelay`. With the
/// default `jitter` of 1 that is anywhere from 0 to `w` (full jitter): when a server restarts under
/// 10,000 clients, they come back spread over its `retry:` instead of in one instant, which is
/// the reconnect storm the server would otherwise have to hold. A `retry:` larger than
/// `maximumDelay` raises the cap to it.
///
/// An answer with `Retry-After` (a 503 `too_many_streams` or `shutting_down`) is honoured: the
/// wait is the `Retry-After` plus the jittered window, so clients refused in the same instant do
/// not all come back when it ends either.
public struct ReconnectPolicy: Sendable, Equatable {
    /// The window of the first reconnection when the server sent no `retry:`. Default 1 s.
    public var initialDelay: Duration
    /// The largest window. Default 60 s.
    public var maximumDelay: Duration
    /// Growth of the window per failed attempt. Default 2.
    public var multiplier: Double
    /// The random part, as a fraction of the window: 1 (the default) waits anywhere in
    /// `[0, window]` (full jitter), 0 waits exactly the window.
    public var jitter: Double

    /// Creates a policy.
    public init(initialDelay: Duration = .seconds(1), maximumDelay: Duration = .seconds(60), multiplier: Double = 2, jitter: Double = 1) {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.multiplier = max(1, multiplier)
        self.jitter = min(max(0, jitter), 1)
    }

    /// The window of reconnection `attempt` (0-based): the longest it waits, `Retry-After` aside.
    public func window(attempt: Int, serverRetry: Duration? = nil) -> Duration {
        let base = serverRetry ?? initialDelay
        let cap = max(maximumDelay, base)
        let grown = Self.seconds(base) * pow(multiplier, Double(max(0, min(attempt, 64))))
        return .nanoseconds(Int64(min((min(Self.seconds(cap), grown) * 1e9).rounded(.down), 9e18)))
    }

    /// The delay before reconnection `attempt` (0-based).
    /// - Parameters:
    ///   - serverRetry: the reconnection time the server asked for (`retry:`), if any.
    ///   - retryAfter: a `Retry-After` the last answer carried, if any: waited in full, before
    ///     the jittered window.
    ///   - random: a value in `0..<1` (the client's injected random source); 0 waits the least.
    public func delay(attempt: Int, serverRetry: Duration? = nil, retryAfter: Duration? = nil, random: Double) -> Duration {
        let w = Self.seconds(window(attempt: attempt, serverRetry: serverRetry))
        let r = min(max(random, 0), 1)
        let d = (retryAfter.map(Self.seconds) ?? 0) + w * (1 - jitter + jitter * r)
        // At most about 292 years, the range of Int64 nanoseconds.
        return .nanoseconds(Int64(min((d * 1e9).rounded(.down), 9e18)))
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
