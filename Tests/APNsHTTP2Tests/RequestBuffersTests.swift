import CCurl
import Foundation
import HeraldAPNs
import HeraldCore
import Testing
@testable import HeraldAPNsHTTP2

/// The per-request memory the engine hands to libcurl without copying.
@Suite struct RequestBuffersTests {
    static func delivery(_ n: Int, notification: String, payload: [UInt8]) -> Delivery {
        Delivery(id: Int64(n), notificationID: notification, app: "a", topic: "a", token: String(format: "%064x", n), user: nil,
                 transport: "apns", content: NotificationContent(alert: .text("x")), payload: RenderedPayload(body: payload))
    }

    @Test func oneCopyOfThePayloadPerNotification() {
        let campaign = Array(#"{"aps":{"alert":"sale"}}"#.utf8), other = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        var cache = PayloadBytes.Cache()
        let first = (1...100).map { cache.bytes(for: Self.delivery($0, notification: "n1", payload: campaign)) }
        let second = cache.bytes(for: Self.delivery(101, notification: "n2", payload: other))
        #expect(first.allSatisfy { $0 === first[0] })
        #expect(second !== first[0])
        #expect(Array(UnsafeRawBufferPointer(start: first[0].base, count: first[0].count)) == campaign)
        #expect(Array(UnsafeRawBufferPointer(start: second.base, count: second.count)) == other)
        // Same notification id, other bytes (never expected, but never sent wrong): a copy of its own.
        let odd = cache.bytes(for: Self.delivery(102, notification: "n1", payload: other))
        #expect(odd !== first[0] && odd.count == other.count)
    }

    @Test func apnsIDHeaderIsRewrittenInPlace() throws {
        let headers = RequestHeaders()
        let shape = HeaderShape(HeaderShape.Key(pushType: .alert, topic: "a", priority: 10))
        let id = try #require(UUID(uuidString: "0123ABCD-4567-89EF-0A1B-2C3D4E5F6A7B"))
        let node = headers.list(apnsID: id, shape: shape)
        #expect(String(cString: node.pointee.data) == "apns-id: 0123abcd-4567-89ef-0a1b-2c3d4e5f6a7b")
        #expect(node.pointee.next == shape.list)
        let again = headers.list(apnsID: try #require(UUID(uuidString: "FFFFFFFF-0000-0000-0000-000000000001")), shape: shape)
        #expect(again == node && String(cString: again.pointee.data) == "apns-id: ffffffff-0000-0000-0000-000000000001")
    }
}
