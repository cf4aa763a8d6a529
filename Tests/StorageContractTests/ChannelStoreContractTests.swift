import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// ``ChannelStore``: the broadcast channels Herald created, on every driver.
struct ChannelStoreContractTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    @Test(arguments: Backend.allCases)
    func channelsAreKeptPerAppAndCountedPerRoute(backend: Backend) async throws {
        try await withStorage(backend) { storage, _ in
            let store = try #require(storage.channels)
            #expect(try await store.channels(app: "app").isEmpty)
            let a = StoredChannel(app: "app", id: "dHN0LU5hbWU+/A==", route: "apns", storagePolicy: .mostRecent, createdAt: t0)
            let b = StoredChannel(app: "app", id: "b2Zm", route: "apns-production", storagePolicy: .none, createdAt: t0.addingTimeInterval(1))
            let other = StoredChannel(app: "other", id: "b2Zm", route: "apns", storagePolicy: .none, createdAt: t0)
            for c in [b, a, other] { try await store.insertChannel(c) }
            #expect(try await store.channels(app: "app") == [a, b])
            #expect(try await store.channelCount(app: "app", route: "apns") == 1)
            #expect(try await store.channelCount(app: "app", route: "apns-production") == 1)
            #expect(try await store.channelCount(app: "other", route: "apns") == 1)
            // The same id again replaces the record.
            var again = a
            again.storagePolicy = .none
            try await store.insertChannel(again)
            #expect(try await store.channels(app: "app") == [again, b])
            #expect(try await store.removeChannel(app: "app", id: a.id))
            #expect(try await store.removeChannel(app: "app", id: a.id) == false)
            #expect(try await store.channels(app: "app") == [b])
            #expect(try await store.channels(app: "other") == [other])
        }
    }
}
