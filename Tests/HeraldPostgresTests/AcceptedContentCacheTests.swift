import HeraldAPNs
import HeraldCore
@testable import HeraldPostgres
import Testing

/// The accepting node's copy of its notifications' content, until their first claims.
struct AcceptedContentCacheTests {
    let content = NotificationContent(alert: .text("hi"))

    @Test func anEntryLastsUntilEachWaitingDeliveryWasClaimedOnce() {
        var cache = AcceptedContentCache(limit: 10)
        cache.insert("n1", content, unclaimed: 2)
        cache.insert("none", content, unclaimed: 0)
        #expect(cache.count == 1)
        #expect(cache.claim("n1") == content)
        #expect(cache.claim("n1") == content)
        #expect(cache.claim("n1") == nil)
        #expect(cache.count == 0)
        cache.insert("failed", content, unclaimed: 1)
        cache.remove("failed")
        #expect(cache.claim("failed") == nil)
    }

    @Test func entriesAnotherNodeClaimedLeaveOldestFirstAtTheLimit() {
        var cache = AcceptedContentCache(limit: 3)
        for i in 0..<3 { cache.insert("n\(i)", content, unclaimed: 1) }
        _ = cache.claim("n1")
        for i in 3..<5 { cache.insert("n\(i)", content, unclaimed: 1) }
        // n0 went to make room; n1 was claimed; n2, n3, n4 remain.
        #expect(cache.count == 3)
        #expect(cache.claim("n0") == nil)
        #expect(["n2", "n3", "n4"].allSatisfy { cache.claim($0) != nil })
        // Many inserts and claims later it holds the newest unclaimed ones.
        for i in 5..<10_000 {
            cache.insert("n\(i)", content, unclaimed: 1)
            if i % 2 == 0 { _ = cache.claim("n\(i)") }
        }
        #expect(cache.count == 3)
        #expect(cache.claim("n9999") != nil && cache.claim("n9997") != nil && cache.claim("n9995") != nil)
    }
}
