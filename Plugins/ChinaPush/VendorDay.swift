import FoundationEssentials
import HeraldCore

/// The day China's push vendors count their daily quotas in: it ends at midnight in UTC+8
/// (Beijing time, no daylight saving).
public enum VendorDay {
    /// UTC+8, in seconds.
    public static let utcOffset: TimeInterval = 8 * 3600

    /// When the vendor day holding `date` ends: the next midnight in UTC+8 strictly after `date`.
    public static func end(of date: Date) -> Date {
        let local = date.timeIntervalSince1970 + utcOffset
        let dayStart = (local / 86_400).rounded(.down) * 86_400
        return Date(timeIntervalSince1970: dayStart + 86_400 - utcOffset)
    }
}
