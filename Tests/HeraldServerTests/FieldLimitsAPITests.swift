import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// One bound per field, wherever the field appears in the API (issue 24, item 14).
@Suite(.serialized, .stopsDaemons) struct FieldLimitsAPITests {
    @Test func aUserIdOverTheBoundIsRefusedEverywhere() async throws {
        let (d, push) = try await LocalDeliveryTests.start(policy: "push-only")
        let app = LocalDeliveryTests.app
        let long = String(repeating: "u", count: 10_000)
        let token = String(repeating: "ab", count: 32)
        func refusal(_ r: HTTPTestClient.Response) -> String {
            "\(r.status) \(r.errorField ?? "-") \(r.json?["error"]?["message"]?.stringValue ?? "-")"
        }
        let device = try await d.client.post("/v1/devices", #"{"app":"\#(app)","user":"\#(long)","token":"\#(token)"}"#)
        #expect(refusal(device) == "400 user must be at most 256 bytes, found 10000", "\(device)")
        let notification = try await d.client.post("/v1/notifications", #"{"app":"\#(app)","users":["alice","\#(long)"],"alert":"x"}"#)
        #expect(notification.status == 400, "\(notification)")
        #expect(notification.text.contains("users[1]") && notification.text.contains("must be at most 256 bytes, found 10000"), "\(notification)")
        let mint = try await d.client.post("/v1/client-tokens", #"{"app":"\#(app)","user":"\#(long)","device":"\#(token)"}"#)
        #expect(refusal(mint) == "400 user must be at most 256 bytes, found 10000", "\(mint)")
        let list = try await d.client.get("/v1/users/\(long)/devices")
        #expect(refusal(list) == "400 user must be at most 256 bytes, found 10000", "\(list)")
        // At the bound, each is accepted.
        let edge = String(repeating: "u", count: 256)
        #expect(try await d.client.post("/v1/devices", #"{"app":"\#(app)","user":"\#(edge)","token":"\#(token)"}"#).status == 201)
        #expect(try await d.client.post("/v1/notifications", #"{"app":"\#(app)","users":["\#(edge)"],"alert":"x"}"#).status == 202)
        #expect(try await d.client.get("/v1/users/\(edge)/devices").status == 200)
        #expect(await eventually(timeout: 10) { push.attempts.count == 1 })
    }
}
