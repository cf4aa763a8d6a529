import CCurl
import Foundation
import HeraldHTTP2
import Testing
@testable import HeraldHTTP2

@Suite struct ResponseTests {
    @Test func retryAfterInSecondsOrAsAnHTTPDate() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(HTTP2Response(status: 429, headers: [HTTP2Header("retry-after", "120")], receivedAt: now).retryAfter == 120)
        #expect(HTTP2Response(status: 429, headers: [HTTP2Header("Retry-After", " 7 ")], receivedAt: now).retryAfter == 7)
        // 1700000000 is Tue, 14 Nov 2023 22:13:20 GMT.
        #expect(HTTP2Response(status: 503, headers: [HTTP2Header("retry-after", "Tue, 14 Nov 2023 22:14:20 GMT")], receivedAt: now).retryAfter == 60)
        #expect(HTTP2Response(status: 503, headers: [HTTP2Header("retry-after", "Tue, 14 Nov 2023 22:00:00 GMT")], receivedAt: now).retryAfter == 0)
        #expect(HTTP2Response(status: 503, headers: [HTTP2Header("retry-after", "soon")], receivedAt: now).retryAfter == nil)
        #expect(HTTP2Response(status: 503, receivedAt: now).retryAfter == nil)
    }

    @Test func headerNamesAreLowercase() {
        #expect(HTTP2Header("Content-Type", "a").name == "content-type")
        let r = HTTP2Response(status: 200, headers: [HTTP2Header("apns-id", "x")])
        #expect(r.header("APNS-ID") == "x" && r.header("other") == nil)
    }

    @Test func ownHeaderNodesAreRewrittenInPlaceInFrontOfTheSharedList() throws {
        let shape = HeaderShape(ShapeKey(method: "POST", headers: [HTTP2Header("apns-topic", "a")], added: [HTTP2Header("authorization", "bearer t")]))
        let headers = RequestHeaders()
        let first = try #require(headers.list(own: [HTTP2Header("apns-id", "0123abcd-4567-89ef-0a1b-2c3d4e5f6a7b")], shape: shape))
        #expect(String(cString: first.pointee.data) == "apns-id: 0123abcd-4567-89ef-0a1b-2c3d4e5f6a7b")
        #expect(first.pointee.next == shape.list)
        var shared: [String] = []
        var node = shape.list
        while let n = node { shared.append(String(cString: n.pointee.data)); node = n.pointee.next }
        #expect(shared == ["apns-topic: a", "authorization: bearer t", "Content-Type:", "Accept:", "Expect:"])
        let again = try #require(headers.list(own: [HTTP2Header("apns-id", "ffffffff-0000-0000-0000-000000000001")], shape: shape))
        #expect(again == first && String(cString: again.pointee.data) == "apns-id: ffffffff-0000-0000-0000-000000000001")
        #expect(headers.list(own: [], shape: shape) == shape.list)
    }
}
