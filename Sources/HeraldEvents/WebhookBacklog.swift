import FoundationEssentials
import Glibc
import HeraldCore

/// What waits for one webhook: `herald webhooks list`.
public struct WebhookBacklog: Sendable, Equatable {
    /// The last event the webhook acknowledged; `nil` when no daemon sent to it yet.
    public var cursor: Int64?
    /// Events it takes that wait (at most ``scanLimit`` are looked at).
    public var pending: Int
    /// Whether more events than ``scanLimit`` were looked at (then ``pending`` is a lower bound).
    public var truncated: Bool
    /// When the oldest waiting event was recorded.
    public var oldest: Date?

    /// Most events read to count a backlog.
    public static let scanLimit = 100_000

    public init(cursor: Int64?, pending: Int, truncated: Bool, oldest: Date?) {
        self.cursor = cursor
        self.pending = pending
        self.truncated = truncated
        self.oldest = oldest
    }

    /// Reads `webhook`'s backlog from `outbox`.
    public static func measure(_ webhook: WebhooksConfiguration.Webhook, in outbox: any EventOutbox) async throws -> WebhookBacklog {
        guard let cursor = try await outbox.webhookCursor(webhook.id) else {
            return WebhookBacklog(cursor: nil, pending: 0, truncated: false, oldest: nil)
        }
        var after = cursor, pending = 0, scanned = 0
        var oldest: Date?
        while scanned < scanLimit {
            let chunk = try await outbox.events(after: after, limit: 1000)
            if chunk.isEmpty { break }
            for e in chunk where webhook.filter.admits(e) {
                pending += 1
                if oldest == nil { oldest = e.createdAt }
            }
            scanned += chunk.count
            after = chunk.last!.sequence
        }
        return WebhookBacklog(cursor: cursor, pending: pending, truncated: scanned >= scanLimit, oldest: oldest)
    }
}
