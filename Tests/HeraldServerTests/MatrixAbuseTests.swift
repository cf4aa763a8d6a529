import Foundation
import HeraldCore
@testable import HeraldMatrix
import HeraldServer
import HeraldTestKit
import Testing

/// What a stranger can make the unauthenticated Matrix endpoint do (issue 24, items 9 and 10):
/// rate limits per `app_id` and per source, a log line per burst rather than per request,
/// `matrix.maxDevicesPerApp`, no reach into devices the API registered, and
/// `matrix.allowedSources`. The clock is frozen, so buckets refill only when a test says so.
@Suite(.serialized, .stopsDaemons) struct MatrixAbuseTests {
    typealias F = MatrixGatewayFixture

    static func start(_ matrix: String = #"{"apps": {"x": {"app": "com.example.app"}}}"#, clock: TestClock,
                      transport: ScriptedTransport? = nil) async throws -> TestDaemon {
        let config = TestDaemon.configJSON(extra: ", \"matrix\": " + matrix)
        guard let transport else { return try await TestDaemon.start(config: config, clock: clock) }
        return try await TestDaemon.start(config: config, clock: clock, transports: { _ in transport })
    }

    /// A badge-only notify (no event id: every one is queued) for `appID`.
    static func badge(_ appID: String, _ n: Int) -> String {
        F.body(eventID: nil, type: nil, pushkey: TestDaemon.token(n), appID: appID, extra: #""counts": {"unread": 1}"#)
    }

    static func metric(_ text: String, _ series: String) -> Int? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Int($0.split(separator: " ").last ?? "") }
    }

    /// Item 9: 1,500 notifies from 127.0.0.2, each with an `app_id` of its own that is not
    /// configured. Today one global bucket of 1,000 serves everyone, so the stranger empties it
    /// and the homeservers get 429. Now the stranger has its source's bucket for unknown app ids
    /// (200), and homeservers at another address, or at the stranger's own address, still get
    /// 200; 1,300 refusals write one log line, and the metrics count them with a bounded label set.
    @Test(.timeLimit(.minutes(2))) func aStrangersFloodOfUnknownAppIDsSilencesNoHomeserver() async throws {
        let clock = TestClock()
        let d = try await Self.start(clock: clock)
        do {
            let before = d.logs.records.count
            let flood = try await MatrixSourceClient.flood(port: d.port, from: "127.0.0.2", count: 1500) { Self.badge("stranger.\($0)", 1) }
            #expect(flood == [200: 200, 429: 1300], "\(flood)")
            let during = Array(d.logs.records.dropFirst(before))
            #expect(during.count <= 3, "\(during.map { LogFormat.logfmt.render($0) })")
            #expect(during.filter { $0.message == "Matrix notify refused" }.count == 1)
            #expect(during.filter { $0.message == "pushkey not sent" }.count == 1)

            let homeserver = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.1", body: Self.badge("x", 2))
            #expect(homeserver.status == 200 && homeserver.body == "{\"rejected\":[]}\n", "\(homeserver)")
            let sameAddress = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.2", body: Self.badge("x", 3))
            #expect(sameAddress.status == 200, "\(sameAddress)")
            let stillRefused = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.2", body: Self.badge("stranger.x", 1))
            #expect(stillRefused.status == 429 && stillRefused.body.contains("M_LIMIT_EXCEEDED")
                    && stillRefused.body.contains("matrix.maxRequestsPerSecondPerSource"), "\(stillRefused)")

            let metrics = try await d.client.get("/metrics").text
            #expect(Self.metric(metrics, #"herald_matrix_refused_total{reason="rate_per_source"}"#) == 1301)
            #expect(Self.metric(metrics, #"herald_matrix_pushkeys_total{app_id="unknown",outcome="rejected_unknown_app"}"#) == 200)
            #expect(!metrics.contains("stranger."))

            // Ten seconds on, the next request writes the summaries of what was only counted.
            clock.advance(by: 10)
            let after = d.logs.records.count
            _ = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.1", body: Self.badge("x", 2))
            let summaries = d.logs.records.dropFirst(after).map(\.message)
            #expect(summaries.contains("refused 1301 Matrix notify requests from 1 source in the last 10 s"), "\(summaries)")
            #expect(summaries.contains("sent nothing to 200 Matrix pushkeys from 1 source in the last 10 s"), "\(summaries)")
        } catch { Issue.record(error) }
        await d.stop()
    }

    /// A stranger flooding a configured `app_id` is held to its source's share
    /// (`maxRequestsPerSecondPerSource`, below the app's `maxRequestsPerSecond`), so a homeserver
    /// at another address is still served.
    @Test(.timeLimit(.minutes(2))) func aStrangerFloodingAConfiguredAppIDIsHeldToItsSourcesShare() async throws {
        let clock = TestClock()
        let d = try await Self.start(#"{"maxRequestsPerSecond": 300, "maxRequestsPerSecondPerSource": 200, "apps": {"x": {"app": "com.example.app"}}}"#,
                                     clock: clock)
        do {
            let flood = try await MatrixSourceClient.flood(port: d.port, from: "127.0.0.2", count: 400) { _ in Self.badge("x", 1) }
            #expect(flood == [200: 200, 429: 200], "\(flood)")
            for n in 2...4 {
                let r = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.3", body: Self.badge("x", n))
                #expect(r.status == 200, "\(r)")
            }
            let metrics = try await d.client.get("/metrics").text
            #expect(Self.metric(metrics, #"herald_matrix_refused_total{reason="rate_per_source"}"#) == 200)
        } catch { Issue.record(error) }
        await d.stop()
    }

    /// Item 10: `matrix.maxDevicesPerApp`. A request with 8 new pushkeys for an app capped at 5
    /// registers and sends 5, and is answered 503 `M_RESOURCE_LIMIT_EXCEEDED` with Retry-After
    /// (not `rejected`, which would make the homeserver delete the pusher); known pushkeys are
    /// still served.
    @Test(.timeLimit(.minutes(1))) func newPushkeysPastMaxDevicesPerAppAreRefused() async throws {
        let clock = TestClock()
        let transport = ScriptedTransport(name: "t", clock: SystemClock())
        let d = try await Self.start(#"{"maxDevicesPerApp": 5, "apps": {"x": {"app": "com.example.app"}}}"#, clock: clock, transport: transport)
        do {
            let devices = (1...8).map { #"{"app_id": "x", "pushkey": "\#(TestDaemon.token($0))"}"# }.joined(separator: ", ")
            let many = #"{"notification": {"event_id": "$many", "room_id": "!r:x", "counts": {"unread": 1}, "devices": [\#(devices)]}}"#
            let r = try await HTTPTestClient(port: d.port).post(F.notifyPath, many)
            #expect(r.status == 503 && r.json?["errcode"]?.stringValue == "M_RESOURCE_LIMIT_EXCEEDED" && r.headers["retry-after"] != nil, "\(r)")
            #expect(r.json?["error"]?.stringValue?.contains("matrix.maxDevicesPerApp (5)") == true, "\(r)")
            let listed = try await d.client.get("/v1/users/matrix:x/devices?app=com.example.app&include_invalidated=true")
            #expect(listed.json?["devices"]?.arrayValue?.count == 5, "\(listed)")
            #expect(await eventually(timeout: 10) { transport.attempts.count == 5 })

            let known = try await HTTPTestClient(port: d.port).post(F.notifyPath, F.body(eventID: "$2", pushkey: TestDaemon.token(3), appID: "x"))
            #expect(known.status == 200 && known.text == "{\"rejected\":[]}\n", "\(known)")
            #expect(await eventually(timeout: 10) { transport.attempts.count == 6 })
            let another = try await HTTPTestClient(port: d.port).post(F.notifyPath, F.body(eventID: "$3", pushkey: TestDaemon.token(9), appID: "x"))
            #expect(another.status == 503, "\(another)")
            let metrics = try await d.client.get("/metrics").text
            #expect(Self.metric(metrics, #"herald_matrix_pushkeys_total{app_id="x",outcome="device_limit"}"#) == 4)
        } catch { Issue.record(error) }
        await d.stop()
    }

    /// Item 10: the README's own pushkey (base64 of 31 zero bytes and a 1) is the token of a
    /// device the devices API registered for `alice`. Today the gateway pushes to alice's phone
    /// with a sender name the caller chose; now it sends nothing there, does not take the device
    /// over, and does not reject the pushkey.
    @Test(.timeLimit(.minutes(1))) func theGatewayNeverPushesToADeviceTheAPIRegistered() async throws {
        let clock = TestClock()
        let transport = ScriptedTransport(name: "t", clock: SystemClock())
        let d = try await Self.start(clock: clock, transport: transport)
        do {
            let readmePushkey = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE="
            let alicesToken = try MatrixPushkey.hexToken(readmePushkey)
            #expect(alicesToken == TestDaemon.token(1))
            let registered = try await d.client.post("/v1/devices", #"{"app": "com.example.app", "user": "alice", "token": "\#(alicesToken)"}"#)
            #expect(registered.status == 201 || registered.status == 200, "\(registered)")

            let forged = #"""
                {"notification": {"event_id": "$e1", "room_id": "!r:example.org", "type": "m.room.message",
                  "sender": "@bob:example.org", "sender_display_name": "Your bank", "content": {"msgtype": "m.text", "body": "Call us now"},
                  "counts": {"unread": 1}, "devices": [{"app_id": "x", "pushkey": "\#(readmePushkey)", "pushkey_ts": 1700000000}]}}
                """#
            let r = try await HTTPTestClient(port: d.port).post(F.notifyPath, forged)
            #expect(r.status == 200 && r.text == "{\"rejected\":[]}\n", "\(r)")
            // A genuine Matrix pushkey after it: once that one is sent, the forged one would have been too.
            let genuine = try await HTTPTestClient(port: d.port).post(F.notifyPath, F.body(eventID: "$e2", pushkey: TestDaemon.token(2), appID: "x"))
            #expect(genuine.status == 200, "\(genuine)")
            #expect(await eventually(timeout: 10) { transport.attempts.contains { $0.delivery.token == TestDaemon.token(2) } })
            #expect(!transport.attempts.contains { $0.delivery.token == alicesToken })

            let alice = try await d.client.get("/v1/users/alice/devices?app=com.example.app")
            #expect(alice.json?["devices"]?.arrayValue?.first?["token"]?.stringValue == alicesToken, "\(alice)")
            let matrixDevices = try await d.client.get("/v1/users/matrix:x/devices?app=com.example.app&include_invalidated=true")
            #expect(matrixDevices.json?["devices"]?.arrayValue?.compactMap { $0["token"]?.stringValue } == [TestDaemon.token(2)], "\(matrixDevices)")
            let metrics = try await d.client.get("/metrics").text
            #expect(Self.metric(metrics, #"herald_matrix_pushkeys_total{app_id="x",outcome="foreign_device"}"#) == 1)
        } catch { Issue.record(error) }
        await d.stop()
    }

    /// Item 10: `matrix.allowedSources`. A notify from an address outside it gets 403 with the
    /// Matrix error shape and is counted; one from inside is served.
    @Test(.timeLimit(.minutes(1))) func allowedSourcesRefusesEveryOtherAddress() async throws {
        let clock = TestClock()
        let d = try await Self.start(#"{"allowedSources": ["127.0.0.2", "2001:db8::/32"], "apps": {"x": {"app": "com.example.app"}}}"#, clock: clock)
        do {
            let outside = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.1", body: Self.badge("x", 1))
            #expect(outside.status == 403, "\(outside)")
            let error = try JSONValue.parse(Data(outside.body.utf8))
            #expect(error["errcode"]?.stringValue == "M_FORBIDDEN")
            #expect(error["error"]?.stringValue?.contains("matrix.allowedSources") == true)
            let inside = try await MatrixSourceClient.notify(port: d.port, from: "127.0.0.2", body: Self.badge("x", 1))
            #expect(inside.status == 200 && inside.body == "{\"rejected\":[]}\n", "\(inside)")
            let metrics = try await d.client.get("/metrics").text
            #expect(Self.metric(metrics, #"herald_matrix_refused_total{reason="source_not_allowed"}"#) == 1)
            #expect(metrics.contains(#"herald_http_requests_total{route="POST /_matrix/push/v1/notify",status="403"} 1"#))
        } catch { Issue.record(error) }
        await d.stop()
    }
}

/// `herald_http_requests_total` counts only `POST` to the notify path under the notify route;
/// other `/_matrix/…` paths and methods are `other` (the issue's README list).
@Suite(.stopsDaemons) struct MatrixRouteMetricTests {
    @Test func otherMatrixPathsAndMethodsAreNotCountedAsNotifies() async throws {
        let d = try await MatrixAbuseTests.start(clock: TestClock())
        do {
            let c = HTTPTestClient(port: d.port)
            #expect(try await c.get("/_matrix/foo").status == 404)
            #expect(try await c.get(MatrixGatewayFixture.notifyPath).status == 405)
            #expect(try await c.post(MatrixGatewayFixture.notifyPath, MatrixAbuseTests.badge("x", 1)).status == 200)
            let metrics = try await d.client.get("/metrics").text
            #expect(metrics.contains(#"herald_http_requests_total{route="POST /_matrix/push/v1/notify",status="200"} 1"#))
            #expect(!metrics.contains(#"herald_http_requests_total{route="POST /_matrix/push/v1/notify",status="404"}"#))
            #expect(!metrics.contains(#"herald_http_requests_total{route="POST /_matrix/push/v1/notify",status="405"}"#))
            #expect(metrics.contains(#"herald_http_requests_total{route="other",status="404"} 1"#), "\(metrics)")
            #expect(metrics.contains(#"herald_http_requests_total{route="other",status="405"} 1"#), "\(metrics)")
        } catch { Issue.record(error) }
        await d.stop()
    }
}

/// The limiter, the device cap and the log digest on their own, with explicit times.
@Suite struct MatrixLimitUnitTests {
    static let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    /// A flood from 10,000 addresses (or IPv6 hosts in as many /64s) keeps at most the table's
    /// size of per-source entries; hosts of one /64 share one.
    @Test func thePerSourceTableIsBounded() {
        let limiter = MatrixRateLimiter(trackedSources: 64)
        for i in 0..<10_000 {
            let source = IPAddress("10.\(i >> 8 & 0xff).\(i & 0xff).1")!
            _ = limiter.admit(source: source, apps: [.unknown], perSource: 1, perApp: 1_000_000, configured: ["x"], now: Self.t0)
        }
        #expect(limiter.trackedCount == 64)
        let one = MatrixRateLimiter()
        for i in 0..<100 {
            _ = one.admit(source: IPAddress("2001:db8:0:1::\(String(i, radix: 16))")!, apps: [.unknown], perSource: 1_000, perApp: 1_000_000,
                          configured: [], now: Self.t0)
        }
        #expect(one.trackedCount == 1)
    }

    /// The least recently used source is evicted, so a homeserver that keeps sending keeps its
    /// (partly used) bucket while a parade of strangers passes.
    @Test func evictionIsLeastRecentlyUsed() {
        var table = LRUTable<Int, Int>(capacity: 3)
        for k in [1, 2, 3] { table.update(k, make: { k * 10 }) { _ in } }
        table.update(1, make: { 0 }) { $0 += 1 }   // 1 is now the most recent
        table.update(4, make: { 40 }) { _ in }     // evicts 2
        #expect(table.count == 3 && table.contains(1) && !table.contains(2) && table.contains(3) && table.contains(4))
        #expect(table.update(1, make: { 0 }) { $0 } == 11)
    }

    @Test func perAppBucketsAreSharedBySourcesAndUnknownAppsHaveTheirOwn() {
        let limiter = MatrixRateLimiter()
        let a = IPAddress("192.0.2.1")!, b = IPAddress("192.0.2.2")!
        #expect(limiter.admit(source: a, apps: [.app("x")], perSource: 10, perApp: 2, configured: ["x"], now: Self.t0) == nil)
        #expect(limiter.admit(source: b, apps: [.app("x")], perSource: 10, perApp: 2, configured: ["x"], now: Self.t0) == nil)
        #expect(limiter.admit(source: a, apps: [.app("x")], perSource: 10, perApp: 2, configured: ["x"], now: Self.t0) == .perApp(wait: 0.5))
        #expect(limiter.admit(source: a, apps: [.unknown], perSource: 10, perApp: 2, configured: ["x"], now: Self.t0) == nil)
        #expect(limiter.admit(source: a, apps: [.app("x")], perSource: 10, perApp: 2, configured: ["x"], now: Self.t0.addingTimeInterval(0.5)) == nil)
    }

    /// The cap counts from the store once, then in memory; at the cap it looks again only after
    /// a minute (devices pruned meanwhile free their slots).
    @Test func theDeviceCapRecountsAtMostOncePerMinute() async throws {
        let limit = MatrixDeviceLimit()
        let recounts = Locked(0)
        var inStore = 3
        func reserve(_ at: TimeInterval) async throws -> Bool {
            let n = inStore
            return try await limit.reserve("x", cap: 5, now: Self.t0.addingTimeInterval(at)) {
                recounts.withLock { $0 += 1 }
                return n
            }
        }
        var answers: [Bool] = []
        for at in [0.0, 1, 2] { answers.append(try await reserve(at)) }
        #expect(answers == [true, true, false])
        #expect(recounts.withLock { $0 } == 1)
        limit.release("x")
        answers = []
        for at in [3.0, 4] { answers.append(try await reserve(at)) }
        #expect(answers == [true, false])
        inStore = 1
        answers = []
        for at in [30.0, 65] { answers.append(try await reserve(at)) }
        #expect(answers == [false, true])
        #expect(recounts.withLock { $0 } == 2)
    }

    /// 5,000 refusals from 3 sources in 5 s: one line at once, one summary after 10 s.
    @Test func theDigestWritesOneLinePerBurst() {
        let logs = RecordingLogHandler()
        let logger = Logger(label: "api", level: .debug, handler: logs)
        let digest = MatrixLogDigest()
        let sources = ["192.0.2.1", "192.0.2.2", "2001:db8::1"].map { IPAddress($0)! }
        for i in 0..<5000 {
            digest.record(.refused, reason: i % 2 == 0 ? "rate_per_source" : "rate_per_app", source: sources[i % 3],
                          now: Self.t0.addingTimeInterval(Double(i) / 1000), logger: logger) {
                ("Matrix notify refused", ["reason": "rate_per_source"])
            }
        }
        digest.flush(now: Self.t0.addingTimeInterval(9), logger: logger)
        #expect(logs.records.map(\.message) == ["Matrix notify refused"])
        digest.flush(now: Self.t0.addingTimeInterval(10), logger: logger)
        #expect(logs.records.count == 2)
        let summary = logs.records.last!
        #expect(summary.message == "refused 5000 Matrix notify requests from 3 sources in the last 10 s")
        #expect(summary.level == .warning)
        #expect(summary.metadata == ["count": "5000", "rate_per_source": "2500", "rate_per_app": "2500"])
        // After a quiet spell the next one is logged in full again; a lone event has no summary.
        digest.record(.refused, reason: "source_not_allowed", source: sources[0], now: Self.t0.addingTimeInterval(30), logger: logger) {
            ("Matrix notify refused", ["reason": "source_not_allowed"])
        }
        digest.flush(now: Self.t0.addingTimeInterval(45), logger: logger)
        #expect(logs.records.map(\.message) == ["Matrix notify refused", summary.message, "Matrix notify refused"])
    }
}

/// Item 11 end to end: `herald serve` as a child process, a notify whose `app_id` is the issue's
/// hostile string, and the daemon's real standard error, in both log formats.
@Suite(.serialized) struct MatrixLogInjectionTests {
    static let hostile = "x\u{1b}[2J\u{0}\rlevel=critical msg=pwned"
    static let escaped = #"x\u001b[2J\u0000\rlevel=critical msg=pwned"#
    static let pushkey = #"\u009b2J\u007f\u2028ab"#

    @Test(.timeLimit(.minutes(2)), arguments: ["logfmt", "json"])
    func aHostileAppIDReachesTheLogEscaped(format: String) async throws {
        let dir = try TemporaryDirectory(prefix: "herald-log-injection")
        defer { dir.remove() }
        try dir.write("config.json", """
            {
              "storage": {"path": "herald.db"},
              "apps": {"com.example.app": {"routes": ["dry"]}},
              "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
              "api": {"listen": "127.0.0.1:0", "keys": [{"id": "first", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
              "server": {"batchLinger": 0},
              "log": {"level": "info", "format": "\(format)"},
              "matrix": {"apps": {"x": {"app": "com.example.app"}}}
            }
            """)
        let child = try ServeSignalTests.launch(dir)
        defer { child.terminate() }
        let port = try await ServeSignalTests.port(of: child)
        // The app id as JSON escapes in the body: ESC, NUL and CR reach the parser as characters.
        // The pushkey (short enough to be logged whole) carries what JSON itself allows raw:
        // CSI (C1), DEL and the line separator.
        let body = #"{"notification": {"counts": {"unread": 1}, "devices": [{"app_id": "\#(Self.escaped)", "pushkey": "\#(Self.pushkey)"}]}}"#
        let r = try await HTTPTestClient(port: port).post(MatrixGatewayFixture.notifyPath, body)
        #expect(r.status == 200 && r.json?["rejected"]?.arrayValue?.first?.stringValue == "\u{9b}2J\u{7f}\u{2028}ab", "\(r)")
        let expected = format == "json" ? [#""app_id":"\#(Self.escaped)""#, #""pushkey":"\#(Self.pushkey)""#]
            : [#"app_id="\#(Self.escaped)""#, #"pushkey="\#(Self.pushkey)""#]
        #expect(await eventually(timeout: 30) { expected.allSatisfy { child.stderr.contains($0) } }, "\(child.stderr)")
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 60) == 0, "\(child.stderr)")

        let stderr = child.stderr
        let raw = stderr.unicodeScalars.filter { $0.value < 0x20 && $0 != "\n" || (0x7f...0x9f).contains($0.value) || $0.value == 0x2028 }
        #expect(raw.isEmpty, "raw control characters in the log: \(raw.map { String($0.value, radix: 16) })")
        let lines = stderr.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("level=critical") || $0.contains("level=critical msg=pwned") && !$0.contains(#"\r"#) })
        #expect(lines.filter { $0.contains("pwned") }.count == 1, "\(stderr)")
        if format == "json" {
            for line in lines where line.hasPrefix("{") {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String]
                #expect(object != nil, "not a JSON object of strings: \(line)")
                if line.contains("pwned") { #expect(object?["app_id"] == Self.hostile) }
            }
        }
    }
}
