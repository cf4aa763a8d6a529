import HeraldCore

/// The content of notifications this node accepted, by notification id, until
/// their deliveries are claimed for the first time, so a claim of its own accepts need not parse
/// the stored JSON again (as ``NotificationCache`` does for SQLite).
///
/// On a shared queue another node may claim some of those deliveries; their entries are never
/// claimed here and leave oldest first once the cache holds `limit` notifications. A miss only
/// costs the parse.
struct AcceptedContentCache {
    private var entries: [String: (content: NotificationContent, unclaimed: Int)] = [:]
    /// Ids in insertion order from `head` on (some already gone), for evicting the oldest.
    private var order: [String] = []
    private var head = 0
    let limit: Int

    init(limit: Int) { self.limit = max(1, limit) }

    var count: Int { entries.count }

    /// Caches a notification with `unclaimed` deliveries waiting for their first claim.
    mutating func insert(_ id: String, _ content: NotificationContent, unclaimed: Int) {
        guard unclaimed > 0 else { return }
        entries[id] = (content, unclaimed)
        order.append(id)
        while entries.count > limit, head < order.count {
            entries[order[head]] = nil
            head += 1
        }
        if order.count - head > 2 * limit {
            // Mostly ids claimed meanwhile: keep the live ones, in order.
            order = order[head...].filter { entries[$0] != nil }
            head = 0
        } else if head > limit {
            order.removeFirst(head)
            head = 0
        }
    }

    /// Forgets `id` (its accept stored nothing).
    mutating func remove(_ id: String) { entries[id] = nil }

    /// The content of `id`, counting one of its deliveries as claimed.
    mutating func claim(_ id: String) -> NotificationContent? {
        guard let entry = entries[id] else { return nil }
        if entry.unclaimed <= 1 { entries[id] = nil } else { entries[id]!.unclaimed -= 1 }
        return entry.content
    }
}
