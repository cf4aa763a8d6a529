import Foundation
import HeraldCore
@testable import HeraldSQLite
import Testing

struct NotificationCacheTests {
    let sample = CachedNotification(id: "n1", app: "a", topic: "a", content: NotificationContent(alert: .text("x")),
                                    createdAt: Date(timeIntervalSince1970: 0))

    @Test func entriesLeaveAfterTheirLastFirstClaimAndRetriesOnlyLook() {
        var cache = NotificationCache(limit: 10)
        cache.insert(7, sample, unclaimed: 2)
        #expect(cache.claim(7)?.id == "n1")
        // A retry of the first delivery looks without using up the second delivery's claim.
        #expect(cache.peek(7)?.id == "n1")
        #expect(cache.peek(7)?.id == "n1")
        #expect(cache.claim(7)?.id == "n1")
        #expect(cache.peek(7) == nil)
        #expect(cache.claim(7) == nil)
    }

    @Test func theLimitBoundsTheCache() {
        var cache = NotificationCache(limit: 1)
        cache.insert(1, sample, unclaimed: 1)
        cache.insert(2, sample, unclaimed: 1)
        #expect(cache.peek(1) != nil)
        #expect(cache.peek(2) == nil)
    }
}
