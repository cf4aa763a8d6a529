import FoundationEssentials
import Glibc

/// Wall-clock time, injected wherever Herald's behaviour depends on time.
///
/// Backoff, expiry, token refresh and pruning all read the time through this protocol so tests
/// can drive them with a test clock (see `HeraldTestKit.TestClock`) instead of sleeping.
public protocol WallClock: Sendable {
    /// The current time.
    var now: Date { get }
    /// Suspends until `deadline` (returns at once when it has passed).
    /// - Throws: `CancellationError` when the task is cancelled.
    func sleep(until deadline: Date) async throws
}

extension WallClock {
    /// Suspends for `seconds` of this clock's time.
    public func sleep(for seconds: TimeInterval) async throws {
        try await sleep(until: now.addingTimeInterval(seconds))
    }
}

/// The system's real-time clock.
public struct SystemClock: WallClock {
    public init() {}
    public var now: Date { Date() }
    public func sleep(until deadline: Date) async throws {
        let seconds = deadline.timeIntervalSinceNow
        if seconds > 0 {
            try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
        } else {
            try Task.checkCancellation()
        }
    }
}

extension Date {
    /// Milliseconds since 1970, as Apple's 410 timestamps and Herald's store use them.
    public var millisecondsSince1970: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }

    /// A date from milliseconds since 1970.
    public init(millisecondsSince1970 ms: Int64) {
        self.init(timeIntervalSince1970: Double(ms) / 1000)
    }

    /// ISO 8601 with milliseconds, UTC (`2026-11-29T11:43:51.123Z`).
    public var iso8601: String {
        let totalMs = millisecondsSince1970
        var days = totalMs >= 0 ? totalMs / 86_400_000 : (totalMs - 86_399_999) / 86_400_000
        let msOfDay = totalMs - days * 86_400_000
        // Civil date from days since 1970 (H. Hinnant's algorithm).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let doe = days - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ v: Int64, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        let h = msOfDay / 3_600_000, m = msOfDay / 60_000 % 60, sec = msOfDay / 1000 % 60, ms = msOfDay % 1000
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(h, 2)):\(pad(m, 2)):\(pad(sec, 2)).\(pad(ms, 3))Z"
    }
}
