import Foundation
import HeraldCore
@testable import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing

/// The HTTP API end to end over a real socket (127.0.0.1, port 0).
@Suite(.serialized, .stopsDaemons) struct APITests {
    @Test func healthReadyAndMetrics() async throws {
        let d = try await TestDaemon.start()
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

    @Test func readyzQueriesTheStore() async throws {
        let d = try await TestDaemon.start()
        let open = HTTPTestClient(port: d.port)
        #expect(await eventually { (try? await open.get("/readyz").status) == 200 })
        #expect(try await open.get("/readyz").json?["store"] == "open")

        // Another process damages the database: the queue's table is gone.
        let other = try SQLiteDatabase(path: d.database)
        try other.execute("ALTER TABLE notifications RENAME TO notifications_away", operation: "hide the table")
        let broken = try await open.get("/readyz")
        #expect(broken.status == 503)
        #expect(broken.json?["status"] == "not_ready")
        #expect(broken.json?["store"] == "unavailable")
        #expect(broken.json?["transports"]?["t"] == "started")
        _ = try await open.get("/readyz")
        let failures = d.logs.records.filter { $0.message.hasPrefix("the store does not answer") }
        #expect(failures.count == 1, "logged once, not at every probe")
        #expect(failures.first?.metadata["error"]?.contains("no such table: notifications") == true)

        try other.execute("ALTER TABLE notifications_away RENAME TO notifications", operation: "restore the table")
        #expect(try await open.get("/readyz").status == 200)
        #expect(d.logs.text.contains("the store answers again"))
        // A closed queue is not ready either.
        await d.daemon.queue?.close()
        #expect(try await open.get("/readyz").json?["store"] == "unavailable")
    }

    @Test func devicesRegisterListAndRemove() async throws {
        let d = try await TestDaemon.start()
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
        // The Matrix gateway's namespace is its own.
        r = try await c.post("/v1/devices", #"{"app":"com.example.app","user":"matrix:im.vector.app","token":"\#(TestDaemon.token(1))"}"#)
        #expect(r.status == 400 && r.errorField == "user", "\(r.text)")
        r = try await c.delete("/v1/devices/\(TestDaemon.token(1))")
        #expect(r.status == 400)
        #expect(r.errorField == "app")
    }

    @Test func notificationIsAcceptedDeliveredAndReported() async throws {
        let d = try await TestDaemon.start()
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

        // Metrics: one accepted notification; four deliveries through "t" timed from acceptance.
        let metrics = try await d.client.get("/metrics").text
        let lines = metrics.split(separator: "\n").map(String.init)
        #expect(lines.contains(#"herald_notifications_accepted_total{app="com.example.app"} 1"#), "\(metrics)")
        #expect(lines.contains("# TYPE herald_delivery_latency_seconds histogram"))
        let buckets = lines.filter { $0.hasPrefix(#"herald_delivery_latency_seconds_bucket{transport="t",le=""#) }
        let counts = buckets.compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }
        #expect(buckets.count == 16, "15 bounds and +Inf: \(buckets)")
        #expect(buckets.last?.hasPrefix(#"herald_delivery_latency_seconds_bucket{transport="t",le="+Inf"}"#) == true)
        #expect(counts == counts.sorted(), "cumulative")
        #expect(counts.last == 4)
        #expect(lines.contains(#"herald_delivery_latency_seconds_bucket{transport="t",le="60"} 4"#))
        #expect(lines.contains(#"herald_delivery_latency_seconds_count{transport="t"} 4"#))
        let sum = lines.first { $0.hasPrefix(#"herald_delivery_latency_seconds_sum{transport="t"} "#) }
            .flatMap { $0.split(separator: " ").last.flatMap { Double($0) } }
        #expect(sum.map { $0 >= 0 && $0 < 4 * 60 } == true, "\(String(describing: sum))")

        #expect(try await d.client.get("/v1/notifications/no-such-id").status == 404)
    }

    @Test func notificationErrorsNameTheField() async throws {
        let d = try await TestDaemon.start()
        let c = d.client
        // A route judges content only for its own deliveries: user "a" has a device on route "t".
        try await d.register(user: "a", token: TestDaemon.token(1))
        func check(_ body: String, field: String?, code: String = "invalid_request", sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let r = try await c.post("/v1/notifications", body)
            #expect(r.status == 400, "\(r)", sourceLocation: sourceLocation)
            #expect(r.errorCode == code, sourceLocation: sourceLocation)
            #expect(r.errorField == field, "\(r)", sourceLocation: sourceLocation)
        }
        try await check(#"{"app":"com.example.app","users":["a"],"alert":{"titel":"x"}}"#, field: "alert.titel")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","badge":-1}"#, field: "badge")
        try await check(#"{"app":"com.example.app","users":["a"],"alert":"x","apns":{"priority":7}}"#, field: "apns.priority")
        // A user with no device: no route is asked, nothing is sent.
        let none = try await c.post("/v1/notifications", #"{"app":"com.example.app","users":["nobody"],"alert":"x","apns":{"priority":7}}"#)
        #expect(none.status == 202 && none.json?["deliveries"]?.intValue == 0, "\(none)")
        // content_available is a neutral field now, with nothing else a background push.
        #expect(try await c.post("/v1/notifications", #"{"app":"com.example.app","users":["a"],"content_available":true}"#).status == 202)
        // Background pushes take any priority (they are sent with 5).
        #expect(try await c.post("/v1/notifications", #"{"app":"com.example.app","users":["a"],"apns":{"content_available":true,"priority":10}}"#).status == 202)
        try await check(#"{"app":"com.example.app","alert":"x"}"#, field: "users")
        try await check(#"{"app":"com.example.app","users":["a"]}"#, field: "body")
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
        let c = d.client
        var r = try await c.get("/v1/nothing")
        #expect(r.status == 404)
        #expect(r.json?["error"]?["message"] != nil)
        // Every path answers another method with 405 and the one it takes (docs/openapi.yaml).
        for (method, path, allow) in [("DELETE", "/healthz", "GET"), ("POST", "/readyz", "GET"), ("POST", "/metrics", "GET"),
                                      ("GET", "/v1/devices", "POST"), ("GET", "/v1/devices/ab", "DELETE"),
                                      ("POST", "/v1/users/a/devices", "GET"), ("PUT", "/v1/notifications", "POST"),
                                      ("DELETE", "/v1/notifications/x", "GET")] {
            r = try await c.request(method, path)
            #expect(r.status == 405, "\(method) \(path)")
            #expect(r.headers["allow"] == allow, "\(method) \(path)")
            #expect(r.errorCode == "method_not_allowed")
        }
        r = try await c.get("/v1/notifications/%zz")
        #expect(r.status == 400)
        #expect(r.errorField == "path")
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
        let body = #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))"}"#
        var r = try await HTTPTestClient(port: d.port).post("/v1/devices", body)
        #expect(r.status == 401)
        #expect(r.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
        r = try await HTTPTestClient(port: d.port, key: "wrong-key-0123456789abcdef").post("/v1/devices", body)
        #expect(r.status == 401)
        r = try await HTTPTestClient(port: d.port, key: String(TestDaemon.key.dropLast())).post("/v1/devices", body)
        #expect(r.status == 401)
        // Every authenticated path: 401 without a key, 403 without the scope (docs/openapi.yaml).
        let sender = HTTPTestClient(port: d.port, key: TestDaemon.sendOnlyKey)
        for (method, path, scoped) in [("POST", "/v1/devices", true), ("DELETE", "/v1/devices/ab?app=com.example.app", true),
                                       ("GET", "/v1/users/a/devices", true), ("GET", "/metrics", true),
                                       ("POST", "/v1/notifications", false), ("GET", "/v1/notifications/x", false)] {
            let anonymous = try await HTTPTestClient(port: d.port).request(method, path, body: Array("{}".utf8), contentType: "application/json")
            #expect(anonymous.status == 401, "\(method) \(path)")
            #expect(anonymous.errorCode == "unauthorized", "\(method) \(path)")
            if scoped {
                let forbidden = try await sender.request(method, path, body: Array("{}".utf8), contentType: "application/json")
                #expect(forbidden.status == 403, "\(method) \(path)")
                #expect(forbidden.errorCode == "forbidden", "\(method) \(path)")
            }
        }
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

    @Test func commitBacklogAnswers503OverloadedWithRetryAfter() async throws {
        let config = TestDaemon.configJSON(server: #""maxPendingAccepts": 1, "retryAfter": 9"#)
            .replacingOccurrences(of: #""synchronous": "normal""#, with: #""synchronous": "normal", "busyTimeout": "60s""#)
        let d = try await TestDaemon.start(config: config)
        let queue = try #require(d.daemon.queue as? SQLiteDeliveryQueue)
        // Another connection holds the write lock: the queue's writer blocks on its first batch.
        let lock = try SQLiteDatabase(path: d.database)
        try lock.execute("BEGIN IMMEDIATE", operation: "hold the write lock")
        defer { try? lock.execute("ROLLBACK", operation: "release the write lock") }
        let housekeeping = Task { try await queue.reclaimExpiredLeases(now: Date()) }   // a write that blocks the writer
        let body = #"{"app":"com.example.app","tokens":["\#(TestDaemon.token(1))"],"alert":"x"}"#
        // An accept may still join the blocked batch; send until one waits behind it.
        var waiting: [Task<HTTPTestClient.Response, any Error>] = []
        for _ in 0..<10 where queue.waitingAccepts == 0 {
            waiting.append(Task { try await d.client.post("/v1/notifications", body) })
            _ = await eventually(timeout: 0.5) { queue.waitingAccepts > 0 }
        }
        #expect(queue.waitingAccepts == 1)
        let refused = try await d.client.post("/v1/notifications", body)
        #expect(refused.status == 503)
        #expect(refused.errorCode == "overloaded")
        #expect(refused.headers["retry-after"] == "9")
        #expect(refused.json?["error"]?["message"]?.stringValue?.contains("retry after 9 s") == true)

        try lock.execute("COMMIT", operation: "release the write lock")
        _ = try await housekeeping.value
        var accepted = 0
        for t in waiting {
            let r = try await t.value
            if r.status == 202 { accepted += 1 } else { #expect(r.errorCode == "overloaded", "\(r)") }
        }
        #expect(accepted >= 1)
        #expect(try await d.client.post("/v1/notifications", body).status == 202)
        #expect(try await d.client.get("/metrics").text.contains(#"herald_api_backpressure_total{reason="commit_backlog"}"#))
    }

    @Test func openAPIOnLoopbackWithoutKeys() async throws {
        let d = try await TestDaemon.start(config: TestDaemon.configJSON(keys: false))
        let r = try await HTTPTestClient(port: d.port).post("/v1/devices", #"{"app":"com.example.app","user":"a","token":"\#(TestDaemon.token(1))"}"#)
        #expect(r.status == 201)
        // The configuration refuses an open API on other addresses.
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let open = TestDaemon.configJSON(keys: false).replacingOccurrences(of: "127.0.0.1:0", with: "0.0.0.0:0")
        #expect(throws: ConfigurationError.self) { try TestDaemon.parse(open, directory: dir) }
        let empty = TestDaemon.configJSON(keys: false, extra: "").replacingOccurrences(of: #""api": {"#, with: #""api": {"keys": [], "#)
            .replacingOccurrences(of: "127.0.0.1:0", with: "0.0.0.0:0")
        do {
            _ = try TestDaemon.parse(empty, directory: dir)
            Issue.record("\"keys\": [] on 0.0.0.0 must be a configuration error")
        } catch let error as ConfigurationError {
            #expect(error.errors.contains { $0.description.hasPrefix("api.keys: at least one key is required when api.listen (0.0.0.0:0)") },
                    "\(error.errors)")
        }
        // A configuration built in code does not start either.
        var built = try TestDaemon.parse(TestDaemon.configJSON(keys: false), directory: dir)
        built.configuration.api.listen = ListenAddress(host: "0.0.0.0", port: 0)
        let daemon = Daemon(configuration: built, registry: TestDaemon.registry, storage: .embedded, logSink: RecordingLogHandler(),
                            options: Daemon.Options(environment: [:], lockDatabase: false))
        await #expect(throws: DaemonError.self) { try await daemon.start() }
        #expect(daemon.port == 0)
        await daemon.shutdown()
    }
}
