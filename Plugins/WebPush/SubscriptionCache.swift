import HeraldCore

/// The `webpush` transport's parsed subscriptions, by their stored JSON: each subscription's JSON
/// is read, its endpoint checked against the allow list and its `p256dh` imported into an
/// `EVP_PKEY` (with OpenSSL's public-key check, a scalar multiplication) once, not on every
/// delivery to it.
///
/// Bounded: at most ``capacity`` entries; when full, the oldest entry made goes first (a ring),
/// so a gateway with millions of subscriptions keeps the recent ones. Safe to share between
/// threads.
final class SubscriptionCache: Sendable {
    private struct State {
        var entries: [String: WebPushSubscription] = [:]
        /// The keys in the order they were added (a ring of `capacity` slots).
        var ring: [String] = []
        var next = 0
    }

    /// The most subscriptions kept parsed.
    let capacity: Int
    private let allowList: EndpointAllowList
    private let state = Locked(State())

    /// - Parameter capacity: at least 1.
    init(allowList: EndpointAllowList, capacity: Int = 4096) {
        precondition(capacity >= 1, "a subscription cache holds at least one entry")
        self.allowList = allowList
        self.capacity = capacity
    }

    /// The parsed subscription of a stored address: the cached one, or parsed now and kept.
    /// - Throws: ``AddressProblem`` when it is not a usable subscription (not cached).
    func subscription(stored token: String) throws(AddressProblem) -> WebPushSubscription {
        if let hit = state.withLock({ $0.entries[token] }) { return hit }
        // Parsed outside the lock: two threads may parse the same one; the second store is a no-op.
        let parsed = try WebPushSubscription(stored: token, allowList: allowList)
        state.withLock { s in
            guard s.entries[token] == nil else { return }
            if s.ring.count < capacity {
                s.ring.append(token)
            } else {
                s.entries[s.ring[s.next]] = nil
                s.ring[s.next] = token
                s.next = (s.next + 1) % capacity
            }
            s.entries[token] = parsed
        }
        return parsed
    }

    /// How many subscriptions are cached.
    var count: Int { state.withLock { $0.entries.count } }
}
