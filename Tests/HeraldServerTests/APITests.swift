import Foundation
import HeraldCore
@testable import HeraldServer
import HeraldTestKit
import Testing

/// The HTTP API end to end over a real socket (127.0.0.1, port 0).
@Suite(.serialized) struct APITests {
    @Test func healthReadyAndMetrics() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        let open = HTTPTestClient(port: d.port)
        let health = try await open.get("/healthz")
        #expect(health.status == 200)
        #expect(health.json?["status"] == "ok")
        #expect(await eventually { (try? await open.get("/readyz").status) == 200 })
        #expect(try await open.get("/readyz").json?["transports"]?["t"] == "started")

        // /metrics needs the admin scope.
        #expect(try await open.get("/metrics").status == 401)
        #expect(try await HTTPTestClient(port: d.port, key: TestDaemon.sendOnlyKey).get("/metrics").status == 403)
        let metrics = try await d.client.get("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
        #expect(metrics.text.contains("# TYPE herald_http_requests_total counter"))
        #expect(metrics.text.contains("herald_http_connections"))
        #expect(metrics.text.contains(#"herald_queue_depth{transport="t"} 0"#))
    }

    @Test func devicesRegisterListAndRemove() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        let token = TestDaemon.token(1)
        let created = try await d.register(user: "alice", token: "<" + token.uppercased() + ">")
        #expect(created.status == 201)
        #expect(created.json?["token"]?.stringValue == token)
        #expect(created.json?["transport"] == "t")
        #expect(created.json?["change"] == "created")
        let again = try await d.register(user: "alice", token: token)
        #expect(again.status == 200)
        #expect(again.json?["change"] == "updated")
        try await d.register(user: "alice", token: TestDaemon.token(2))

        let list = try await d.client.get("/v1/users/alice/devices?app=com.example.app")
        #expect(list.status == 200)
        #expect(list.json?["devices"]?.arrayValue?.count == 2)
        #expect(list.json?["devices"]?.arrayValue?.first?["invalidated_at"] == .null)

        let removed = try await d.client.delete("/v1/devices/\(token)?app=com.example.app")
        #expect(removed.status == 204)
        #expect(removed.body.isEmpty)
        let missing = try await d.client.delete("/v1/devices/\(token)?app=com.example.app")
        #expect(missing.status == 404)
        #expect(missing.errorCode == "not_found")
        #expect(try await d.client.get("/v1/users/alice/devices?app=com.example.app").json?["devices"]?.arrayValue?.count == 1)
    }

    @Test func deviceErrorsNameTheField() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        let c = d.client
        var r = try await c.post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"xyz"}"#)
        #expect(r.status == 400)
        #expect(r.errorField == "token")
        r = try await c.post("/v1/devices", #"{"app":"com.nope","user":"a","token":"\#(TestDaemon.token(1))"}"#)
        #expect(r.status == 400)
        #expect(r.errorField == "app")
        r = try await c.post("/v1/devices", #"{"app":"com.example.app","token":"\#(TestDaemon.token(1))"}"#)
        #expect(r.errorField == "user")
        r = try await c.post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))","colour":"red"}"#)
        #expect(r.status == 400)
        #expect(r.errorField == "colour")
        r = try await c.post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))","transport":"apns"}"#)
        #expect(r.errorField == "transport")
        r = try await c.post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))","environment":"staging"}"#)
        #expect(r.errorField == "environment")
        r = try await c.delete("/v1/devices/\(TestDaemon.token(1))")
        #expect(r.status == 400)
        #expect(r.errorField == "app")
    }

    @Test func notificationIsAcceptedDeliveredAndReported() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        try await d.register(user: "alice", token: TestDaemon.token(1))
        try await d.register(user: "alice", token: TestDaemon.token(2))
        try await d.register(user: "bob", token: TestDaemon.token(3))
        let body = #"""
        {"app":"com.example.app","users":["alice","bob"],"tokens":["\#(TestDaemon.token(9))","nothex"],
         "alert":{"title":"Hi","body":"There","title_loc_args":["a"]},"badge":3,"sound":{"critical":true,"name":"x.caf","volume":0.5},
         "data":{"order":42},"apns":{"push_type":"alert","priority":5,"collapse_id":"c1","thread_id":"t","interruption_level":"time-sensitive","relevance_score":0.5}}
        """#
        let accepted = try await d.client.post("/v1/notifications", body)
        #expect(accepted.status == 202, "\(accepted)")
        let id = try #require(accepted.json?["id"]?.stringValue)
        #expect(accepted.json?["deliveries"] == 5)

        let status = try await d.waitUntilFinal(id)
        let deliveries = try #require(status["deliveries"]?.arrayValue)
        #expect(deliveries.count == 5)
        let byToken = Dictionary(uniqueKeysWithValues: deliveries.map { ($0["token"]?.stringValue ?? "", $0) })
        #expect(byToken[TestDaemon.token(1)]?["state"] == "delivered")
        #expect(byToken[TestDaemon.token(1)]?["user"] == "alice")
        #expect(byToken[TestDaemon.token(1)]?["attempts"] == 1)
        #expect(byToken[TestDaemon.token(1)]?["apns_id"]?.stringValue?.count == 36)
        #expect(byToken[TestDaemon.token(9)]?["user"] == .null)
        #expect(byToken["nothex"]?["state"] == "rejected")
        #expect(byToken["nothex"]?["reason"]?.stringValue?.contains("tokens[1]") == true)
        #expect(status["summary"]?["delivered"] == 4)

        #expect(try await d.client.get("/v1/notifications/no-such-id").status == 404)
    }

    @Test func notificationErrorsNameTheField() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        let c = d.client
        func check(_ body: String, field: String?, code: String = "invalid_request", sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let r = try await c.post("/v1/notifications", body)
            #expect(r.status == 400, "\(r)", sourceLocation: sourceLocation)
            #expect(r.errorCode == code, sourceLocation: sourceLocation)
            #expect(r.errorField == field, "\(r)", sourceLocation: sourceLocation)
        }
        try await check(#"{"app":"com.example.app","users":["a"],"alert":{"titel":"x"}}"#, field: "alert.titel")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","badge":-1}"#, field: "badge")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","apns":{"priority":7}}"#, field: "apns.priority")
        try await check(#"{"app":"com.example.app","users":["a"],"content_available":true}"#, field: "content_available")
        // Background pushes take any priority (they are sent with 5).
        #expect(try await c.post("/v1/notifications", #"{"app":"com.example.app","users":["a"],"apns":{"content_available":true,"priority":10}}"#).status == 202)
        try await check(#"{"app":"com.example.app","alert":"x"}"#, field: "users")
        try await check(#"{"app":"com.example.app","users":["a"]}"#, field: "alert")
        try await check(#"{"app":"com.example.app","users":"a","alert":"x"}"#, field: "users")
        try await check(#"{"app":"com.nope","users":["a"],"alert":"x"}"#, field: "app")
        try await check(#"{"users":["a"],"alert":"x"}"#, field: "app")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","data":{"aps":{}}}"#, field: "data.aps")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","sound":{"name":"a","volume":2}}"#, field: "sound.volume")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","app":"dup"}"#, field: nil, code: "invalid_json")
        try await check(#"{"app": "com.example.app", "#, field: nil, code: "invalid_json")
        try await check("", field: nil, code: "invalid_json")
    }

    @Test func protocolErrors() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        let c = d.client
        var r = try await c.get("/v1/nothing")
        #expect(r.status == 404)
        #expect(r.json?["error"]?["message"] != nil)
        r = try await c.request("PUT", "/v1/notifications")
        #expect(r.status == 405)
        #expect(r.headers["allow"] == "POST")
        r = try await c.post("/v1/notifications", #"{"app":"com.example.app"}"#, contentType: "text/plain")
        #expect(r.status == 415)
        #expect(r.errorField == "Content-Type")
        r = try await c.post("/v1/notifications", #"{"app":"com.example.app"}"#, contentType: nil)
        #expect(r.status == 415)
        let big = "{\"app\":\"" + String(repeating: "x", count: 5000) + "\"}"
        r = try await c.post("/v1/notifications", big)
        #expect(r.status == 413)
        #expect(r.errorCode == "payload_too_large")
        // A chunked body (no Content-Length) over the limit is refused too.
        r = try await c.request("POST", "/v1/devices", body: Array("\(String(5000, radix: 16))\r\n\(String(repeating: "y", count: 5000))\r\n0\r\n\r\n".utf8),
                          contentType: "application/json", headers: ["Transfer-Encoding": "chunked"])
        #expect(r.status == 413)
    }

    @Test func authenticationAndScopes() async throws {
        let d = try await TestDaemon.start()
        defer { Task { await d.stop() } }
        let body = #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))"}"#
        var r = try await HTTPTestClient(port: d.port).post("/v1/devices", body)
        #expect(r.status == 401)
        #expect(r.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
        r = try await HTTPTestClient(port: d.port, key: "wrong-key-0123456789abcdef").post("/v1/devices", body)
        #expect(r.status == 401)
        r = try await HTTPTestClient(port: d.port, key: String(TestDaemon.key.dropLast())).post("/v1/devices", body)
        #expect(r.status == 401)
        let sender = HTTPTestClient(port: d.port, key: TestDaemon.sendOnlyKey)
        r = try await sender.post("/v1/devices", body)
        #expect(r.status == 403)
        #expect(r.json?["error"]?["message"]?.stringValue?.contains("devices") == true)
        r = try await sender.post("/v1/notifications", #"{"app":"com.example.app","users":["a"],"alert":"x"}"#)
        #expect(r.status == 202)
        #expect(!d.logs.text.contains(TestDaemon.key))
        #expect(!d.logs.text.contains(TestDaemon.token(1)))
        #expect(Authenticator.constantTimeEquals(Array("abc".utf8), Array("abc".utf8)))
        #expect(!Authenticator.constantTimeEquals(Array("abc".utf8), Array("abcd".utf8)))
        #expect(!Authenticator.constantTimeEquals(Array("abd".utf8), Array("abc".utf8)))
    }

    @Test func idempotencyKeyAnswersTheFirstReceiptAndSendsOnce() async throws {
        let transport = ScriptedTransport(name: "t", clock: SystemClock())
        let d = try await TestDaemon.start(transports: { _ in transport })
        defer { Task { await d.stop() } }
        try await d.register(user: "alice", token: TestDaemon.token(1))
        let body = #"{"app":"com.example.app","users":["alice"],"alert":"once","idempotency_key":"order-7"}"#
        let first = try await d.client.post("/v1/notifications", body)
        let second = try await d.client.post("/v1/notifications", body)
        #expect(first.status == 202)
        #expect(second.status == 202)
        #expect(first.json?["id"] == second.json?["id"])
        #expect(second.headers["idempotent-replayed"] == "true")
        // The same key in another app is another notification.
        try await d.register(user: "alice", token: TestDaemon.token(1), app: "org.other.app")
        let other = try await d.client.post("/v1/notifications", #"{"app":"org.other.app","users":["alice"],"alert":"once","idempotency_key":"order-7"}"#)
        #expect(other.json?["id"] != first.json?["id"])
        _ = try await d.waitUntilFinal(try await #require(first.json?["id"]?.stringValue))
        _ = try await d.waitUntilFinal(try await #require(other.json?["id"]?.stringValue))
        #expect(transport.attempts.count == 2)
    }

    @Test func backpressureAnswers503WithRetryAfter() async throws {
        let gate = GatedTransport(name: "t")
        let d = try await TestDaemon.start(config: TestDaemon.configJSON(server: #""maxQueuedPerTransport": 3, "retryAfter": 7"#),
                                           transports: { _ in gate })
        defer { Task { await d.stop() } }
        try await d.register(user: "alice", token: TestDaemon.token(1))
        try await d.register(user: "alice", token: TestDaemon.token(2))
        let body = #"{"app":"com.example.app","users":["alice"],"alert":"x"}"#
        #expect(try await d.client.post("/v1/notifications", body).status == 202)
        let refused = try await d.client.post("/v1/notifications", body)
        #expect(refused.status == 503)
        #expect(refused.headers["retry-after"] == "7")
        #expect(refused.errorCode == "queue_full")
        gate.open()
        #expect(await eventually { (try? await d.client.post("/v1/notifications", body).status) == 202 })
        #expect(try await d.client.get("/metrics").text.contains(#"herald_api_backpressure_total{reason="queue_full"}"#))
    }

    @Test func openAPIOnLoopbackWithoutKeys() async throws {
        let d = try await TestDaemon.start(config: TestDaemon.configJSON(keys: false))
        defer { Task { await d.stop() } }
        let r = try await HTTPTestClient(port: d.port).post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))"}"#)
        #expect(r.status == 201)
        // The configuration refuses an open API on other addresses.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let open = TestDaemon.configJSON(keys: false).replacingOccurrences(of: "127.0.0.1:0", with: "0.0.0.0:0")
        #expect(throws: ConfigurationError.self) { try TestDaemon.parse(open, directory: dir) }
    }
}
