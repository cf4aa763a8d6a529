import FoundationEssentials
import HeraldCore

/// Keeps what strangers can trigger at will (refused requests, pushkeys not sent, payloads
/// trimmed) from writing
/// a log line each: the first event after a quiet spell is logged in full, the following ones
/// are counted, and one summary line per ``interval`` says how many there were, why, and from
/// how many sources ("refused 5870 Matrix notify requests from 1 source in the last 10 s").
///
/// A summary is written when an event or ``flush(now:logger:)`` (called on every notify request) comes
/// after the interval; the counts are in the metrics at once either way.
final class MatrixLogDigest: Sendable {
    /// The two streams of events, each with its own window.
    enum Kind: Sendable, Hashable {
        /// Notify requests answered 429 or 403.
        case refused
        /// Pushkeys rejected or skipped (unknown app, not a token, dead, another user's device, …).
        case notSent
        /// Pushes sent without the `default_payload` keys Herald cannot send.
        case trimmed

        /// Refusals and trimmed payloads are warnings (a homeserver may be over its limits, a
        /// pusher misconfigured); pushkeys not sent are info.
        var level: Logger.Level { self == .notSent ? .info : .warning }

        fileprivate func summary(_ total: Int, sources: String, seconds: Int) -> String {
            switch self {
            case .refused: return "refused \(total) Matrix notify request\(total == 1 ? "" : "s") from \(sources) in the last \(seconds) s"
            case .notSent: return "sent nothing to \(total) Matrix pushkey\(total == 1 ? "" : "s") from \(sources) in the last \(seconds) s"
            case .trimmed: return "left default_payload keys Herald cannot send out of \(total) Matrix push\(total == 1 ? "" : "es") from \(sources) in the last \(seconds) s"
            }
        }
    }

    /// The shortest time between two summaries of one kind.
    static let interval: TimeInterval = 10
    /// Distinct sources a summary counts exactly; past it, it says "more than".
    static let maxCountedSources = 4096

    private struct Window {
        var start: Date
        /// Events in the window, the one logged in full included.
        var total = 0
        /// Whether the window's first event was logged in full.
        var detailed = false
        var reasons: [String: Int] = [:]
        var sources: Set<IPAddress> = []
        var moreSources = false

        /// Whether a summary has anything the detail line did not say.
        var hasNews: Bool { total > (detailed ? 1 : 0) }
    }

    private struct Line {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    private let windows = Locked<[Kind: Window]>([:])

    init() {}

    /// Records one event: logs `detail` at once when it opens a window, else counts it (and logs
    /// the summary of the window it ends, if any).
    /// - Parameter reason: a label from a fixed set (it becomes a summary's metadata key).
    func record(_ kind: Kind, reason: String, source: IPAddress?, now: Date, logger: Logger,
                detail: () -> (message: String, metadata: [String: String])) {
        let lines: [Line] = windows.withLock { w in
            var out: [Line] = []
            if var window = w[kind] {
                if now.timeIntervalSince(window.start) < Self.interval {
                    Self.count(&window, reason: reason, source: source)
                    w[kind] = window
                    return out
                }
                if window.hasNews {
                    // A burst goes on: its summary, and a new window without a detail line.
                    out.append(Self.summary(kind, window, now: now))
                    var next = Window(start: now)
                    Self.count(&next, reason: reason, source: source)
                    w[kind] = next
                    return out
                }
            }
            var window = Window(start: now, detailed: true)
            Self.count(&window, reason: reason, source: source)
            w[kind] = window
            let d = detail()
            out.append(Line(level: kind.level, message: d.message, metadata: d.metadata))
            return out
        }
        for line in lines { logger.log(line.level, line.message, line.metadata) }
    }

    /// Logs the summaries of windows that have ended, and closes the windows with nothing counted.
    func flush(now: Date, logger: Logger) {
        let lines: [Line] = windows.withLock { w in
            var out: [Line] = []
            for (kind, window) in w where now.timeIntervalSince(window.start) >= Self.interval {
                if window.hasNews { out.append(Self.summary(kind, window, now: now)) }
                w[kind] = nil
            }
            return out
        }
        for line in lines { logger.log(line.level, line.message, line.metadata) }
    }

    private static func count(_ window: inout Window, reason: String, source: IPAddress?) {
        window.total += 1
        window.reasons[reason, default: 0] += 1
        if let source = source?.clientPrefix, !window.sources.contains(source) {
            if window.sources.count < maxCountedSources { window.sources.insert(source) } else { window.moreSources = true }
        }
    }

    private static func summary(_ kind: Kind, _ window: Window, now: Date) -> Line {
        let n = window.sources.count
        let sources = window.moreSources ? "more than \(n) sources" : "\(n) source\(n == 1 ? "" : "s")"
        let seconds = max(1, Int(now.timeIntervalSince(window.start).rounded()))
        var metadata = ["count": String(window.total)]
        for (reason, count) in window.reasons { metadata[reason] = String(count) }
        return Line(level: kind.level, message: kind.summary(window.total, sources: sources, seconds: seconds), metadata: metadata)
    }
}
