import FoundationEssentials

/// Records a batch's outcomes, keeping them and trying again with backoff while the store cannot
/// take them (the database is down, the disk is full).
///
/// An answered delivery must never be sent again because its outcome could not be written: if
/// the worker dropped the outcomes, the claim would stay `sent` until its lease ran out and the
/// delivery would go out a second time. So the worker holds them and writes them once the
/// store answers. Fencing makes that safe however late it lands: a claim that was lost meanwhile
/// (its lease ran out and another node claimed the delivery again) is left alone by
/// ``DeliveryQueue/complete(_:now:)``, so the retry ends there too.
///
/// - Important: while it retries, the batch keeps its slot (``TransportWorker/Settings/concurrency``),
///   so a long outage stops new claims, which fail anyway. On stop it makes one more attempt and
///   then gives up: the claims return to the queue when their lease ends, or (SQLite) are settled
///   against the transport's ledger at the next start.
struct OutcomeRecorder: Sendable {
    let queue: any DeliveryQueue
    let clock: any WallClock
    let logger: Logger
    /// First pause after a failed write; doubled after each failure up to ``maxDelay``.
    var initialDelay: TimeInterval = 0.05
    var maxDelay: TimeInterval = 1

    /// Writes `completions`, retrying until the store takes them or `isStopping` says so.
    /// - Returns: whether they were recorded.
    @discardableResult
    func record(_ completions: [DeliveryCompletion], isStopping: () -> Bool) async -> Bool {
        var delay = initialDelay
        var failures = 0
        while true {
            do {
                try await queue.complete(completions, now: clock.now)
                if failures > 0 {
                    logger.notice("recorded outcomes the store refused before", ["deliveries": String(completions.count),
                                                                                 "failed_attempts": String(failures)])
                }
                return true
            } catch {
                failures += 1
                if isStopping() {
                    logger.error("stopping with outcomes not recorded; those deliveries return to the queue when their lease ends",
                                 ["error": String(describing: error), "deliveries": String(completions.count)])
                    return false
                }
                if failures == 1 {
                    logger.error("cannot record outcomes; keeping them and trying again until the store answers",
                                 ["error": String(describing: error), "deliveries": String(completions.count)])
                }
                do { try await clock.sleep(for: delay) } catch { return false }
                delay = min(maxDelay, delay * 2)
            }
        }
    }
}
