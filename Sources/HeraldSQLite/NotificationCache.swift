import FoundationEssentials
import Glibc
import HeraldCore

/// What a claim needs of a notification besides the delivery row, parsed once.
struct CachedNotification {
    var id: String
    var app: String
    var topic: String
    var content: NotificationContent
    var createdAt: Date
}

/// The queue's notifications whose deliveries wait for their first claim, by `seq`, so a claim
/// need not read and parse the stored JSON.
///
/// An entry leaves when its last waiting delivery is claimed for the first time (a retry uses
/// the entry while it is there, else reads the row again), so
/// the cache holds the backlog, never more than `limit` notifications; past the limit new
/// notifications are simply not cached. Used only on the queue's writer thread.
struct NotificationCache {
    private var entries: [Int64: (notification: CachedNotification, unclaimed: Int)] = [:]
    let limit: Int

    init(limit: Int) { self.limit = limit }

    /// Caches a notification with `unclaimed` deliveries waiting for a claim.
    mutating func insert(_ seq: Int64, _ notification: CachedNotification, unclaimed: Int) {
        guard unclaimed > 0, entries.count < limit else { return }
        entries[seq] = (notification, unclaimed)
    }

    /// The notification, counting one of its deliveries as claimed.
    mutating func claim(_ seq: Int64) -> CachedNotification? {
        guard let entry = entries[seq] else { return nil }
        if entry.unclaimed <= 1 { entries[seq] = nil } else { entries[seq]!.unclaimed -= 1 }
        return entry.notification
    }

    /// The notification, if cached, without counting a claim (for retries).
    func peek(_ seq: Int64) -> CachedNotification? { entries[seq]?.notification }

    mutating func remove(_ seq: Int64) { entries[seq] = nil }

    mutating func removeAll() { entries.removeAll() }
}
