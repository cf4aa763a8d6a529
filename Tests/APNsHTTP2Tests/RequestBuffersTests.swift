import Foundation
import HeraldAPNs
import HeraldCore
import HeraldHTTP2
import Testing
@testable import HeraldAPNsHTTP2

/// The per-notification memory the transport hands to the HTTP/2 client (which gives the body
/// to libcurl and nghttp2 without copying it).
@Suite struct RequestBuffersTests {
    static func delivery(_ n: Int, notification: String, payload: [UInt8]) -> Delivery {
        Delivery(id: Int64(n), notificationID: notification, app: "a", topic: "a", token: String(format: "%064x", n), user: nil,
                 transport: "apns", content: NotificationContent(alert: .text("x")), payload: RenderedPayload(body: payload))
    }

    static func request(_ shapes: inout RequestShapes, _ d: Delivery) throws -> HTTP2Request {
        try shapes.request(for: d).get()
    }

    @Test func oneCopyOfThePayloadAndOneHeaderListPerNotification() throws {
        let campaign = Array(#"{"aps":{"alert":"sale"}}"#.utf8), other = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        var shapes = RequestShapes(topic: nil)
        let first = try (1...100).map { try Self.request(&shapes, Self.delivery($0, notification: "n1", payload: campaign)) }
        let second = try Self.request(&shapes, Self.delivery(101, notification: "n2", payload: other))
        #expect(first.allSatisfy { $0.body === first[0].body })
        #expect(second.body !== first[0].body)
        #expect(Array(UnsafeRawBufferPointer(start: first[0].body.base, count: first[0].body.count)) == campaign)
        #expect(Array(UnsafeRawBufferPointer(start: second.body.base, count: second.body.count)) == other)
        // The shared headers are one array (one storage): the client encodes them once.
        let base = first[0].headers.withUnsafeBufferPointer { $0.baseAddress }
        #expect(first.allSatisfy { $0.headers.withUnsafeBufferPointer { $0.baseAddress } == base })
        #expect(first[0].headers.map(\.name) == ["apns-push-type", "apns-topic", "apns-priority"])
        // Per request: the path and apns-id.
        #expect(first[1].path == "/3/device/" + String(format: "%064x", 2))
        #expect(first[1].ownHeaders.map(\.name) == ["apns-id"])
        // Same notification id, other bytes (never expected, but never sent wrong): a copy of its own.
        let odd = try Self.request(&shapes, Self.delivery(102, notification: "n1", payload: other))
        #expect(odd.body !== first[0].body && odd.body.count == other.count)
    }
}
