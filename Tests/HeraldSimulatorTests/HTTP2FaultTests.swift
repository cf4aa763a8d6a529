import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// Fault injection, seen from independent clients: curl, h2load and nghttp.
@Suite("HTTP/2 simulator faults")
struct HTTP2FaultTests {
    static let other = String(repeating: "cd", count: 32)

    func send(_ apns: HTTP2SimulatorHarness, tokens: [String], extra: [String] = []) async throws -> [CurlResponse] {
        let jwt = try apns.jwt()
        let requests = tokens.map { token in
            Curl.Request(apns.url(token: token), ["-H", "authorization: bearer \(jwt)", "-H", "apns-topic: com.example.app",
                                                   "--data-binary", samplePayload] + extra)
        }
        return try await Curl.run(requests, caFile: apns.certificates.caFile).responses
    }

    @Test func unregisteredTokensGet410WithTimestampInMilliseconds() async throws {
        let when = Date(millisecondsSince1970: 1_767_225_600_123)
        var faults = HTTP2Faults()
        faults.unregistered = [sampleToken.uppercased(): when]
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: [sampleToken, Self.other])
        #expect(r[0].status == 410)
        #expect(r[0].body == #"{"reason":"Unregistered","timestamp":1767225600123}"#)
        #expect(r[0].headers["content-type"] == "application/json")
        #expect(r[1].status == 200)
    }

    @Test func expiredTokensGet410ExpiredTokenWithTimestamp() async throws {
        var faults = HTTP2Faults()
        faults.expiredTokens = [Self.other: Date(millisecondsSince1970: 1_767_225_600_000)]
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: [sampleToken, Self.other])
        #expect(r[0].status == 200)
        #expect(r[1].status == 410)
        #expect(r[1].body == #"{"reason":"ExpiredToken","timestamp":1767225600000}"#)
    }

    @Test func unregisteredListFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = try dir.write("unregistered.txt", "# dead tokens\n\(sampleToken) 1767225600000\n\(Self.other)\n\n")
        let list = try HTTP2Faults.readUnregistered(file: file, defaultTime: Date(millisecondsSince1970: 5))
        #expect(list == [sampleToken: Date(millisecondsSince1970: 1_767_225_600_000), Self.other: Date(millisecondsSince1970: 5)])
        let bad = try dir.write("bad.txt", "not-hex\n")
        #expect(throws: HTTP2SimulatorError.self) { try HTTP2Faults.readUnregistered(file: bad, defaultTime: Date()) }
        #expect(throws: HTTP2SimulatorError.self) { try HTTP2Faults.readUnregistered(file: dir.file("missing"), defaultTime: Date()) }
    }

    @Test func tokenFaults() async throws {
        let bad = String(repeating: "01", count: 32), wrongTopic = String(repeating: "02", count: 32), busy = String(repeating: "03", count: 32)
        var faults = HTTP2Faults()
        faults.badDeviceTokens = [bad]
        faults.tokensNotForTopic = [wrongTopic]
        faults.tooManyRequests = [busy]
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: [bad, wrongTopic, busy, sampleToken])
        #expect(r.map(\.status) == [400, 400, 429, 200])
        #expect(r.map { $0.reason ?? "" } == ["BadDeviceToken", "DeviceTokenNotForTopic", "TooManyRequests", ""])
        #expect(apns.simulator.received.map(\.deviceToken) == [sampleToken])
    }

    @Test func perDeviceLimit() async throws {
        var faults = HTTP2Faults()
        faults.requestsPerDeviceLimit = 2
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: [sampleToken, sampleToken, Self.other, sampleToken])
        #expect(r.map(\.status) == [200, 200, 200, 429])
        #expect(r[3].reason == "TooManyRequests")
    }

    @Test func firstRequestsFailWith500Then503() async throws {
        var faults = HTTP2Faults()
        faults.internalServerErrors = 2
        faults.serviceUnavailable = 1
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: Array(repeating: sampleToken, count: 5))
        #expect(r.map(\.status) == [500, 500, 503, 200, 200])
        #expect(r.map { $0.reason ?? "" } == ["InternalServerError", "InternalServerError", "ServiceUnavailable", "", ""])
        #expect(apns.simulator.faults.internalServerErrors == 0)
        // Faults change while running.
        var again = HTTP2Faults()
        again.serviceUnavailable = 1
        apns.simulator.setFaults(again)
        #expect(try await send(apns, tokens: [sampleToken, sampleToken]).map(\.status) == [503, 200])
        #expect(apns.simulator.counters.rejected == ["InternalServerError": 2, "ServiceUnavailable": 2])
    }

    @Test func throttledRequestsGet429ThenSucceed() async throws {
        var faults = HTTP2Faults()
        faults.serviceUnavailable = 1
        faults.throttledRequests = 2
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: [sampleToken, Self.other, sampleToken, Self.other, sampleToken])
        #expect(r.map(\.status) == [503, 429, 429, 200, 200])
        #expect(r.map { $0.reason ?? "" } == ["ServiceUnavailable", "TooManyRequests", "TooManyRequests", "", ""])
        #expect(apns.simulator.faults.throttledRequests == 0)
        #expect(apns.simulator.counters.rejected == ["ServiceUnavailable": 1, "TooManyRequests": 2])
    }

    @Test func resetAndUnansweredStreamsLeaveTheConnectionUp() async throws {
        let reset = String(repeating: "0a", count: 32), silent = String(repeating: "0b", count: 32)
        var faults = HTTP2Faults()
        faults.resetTokens = [reset.uppercased()]
        faults.unansweredTokens = [silent]
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let jwt = try apns.jwt()
        let common = ["-H", "authorization: bearer \(jwt)", "-H", "apns-topic: com.example.app", "--data-binary", samplePayload]
        let result = try await Curl.run([Curl.Request(apns.url(token: sampleToken), common),
                                   Curl.Request(apns.url(token: reset), common),
                                   Curl.Request(apns.url(token: silent), common + ["--max-time", "1"]),
                                   Curl.Request(apns.url(token: Self.other), common)], caFile: apns.certificates.caFile)
        // curl reports the reset and the timeout, and its other requests are answered on the same connection.
        #expect(result.stderr.contains("INTERNAL_ERROR"), "\(result.stderr)")
        #expect(result.stderr.contains("timed out"), "\(result.stderr)")
        #expect(result.responses.map(\.status) == [200, 200], "\(result.responses)")
        #expect(apns.simulator.received.map(\.deviceToken) == [sampleToken, Self.other])
        let counters = apns.simulator.counters
        #expect(counters.connections == 1 && counters.requests == 2)
        #expect(counters.resetStreams == 1 && counters.unansweredStreams == 1)
        #expect(counters.summary.hasSuffix(", streams reset 1, left unanswered 1"))
    }

    @Test func goAwayAfterNStreams() async throws {
        var faults = HTTP2Faults()
        faults.goAwayAfterStreams = 2
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        // curl opens a new connection after the GOAWAY and every request succeeds.
        let r = try await send(apns, tokens: Array(repeating: sampleToken, count: 5))
        #expect(r.map(\.status) == [200, 200, 200, 200, 200])
        #expect(apns.simulator.counters.connections == 3)
        #expect(apns.simulator.counters.goAways == 2)
        #expect(Set(apns.simulator.received.map(\.connectionID)) == [1, 2, 3])
    }

    @Test func goAwayCarriesShutdownAndTheLastStream() async throws {
        var faults = HTTP2Faults()
        faults.goAwayAfterStreams = 1
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let body = try dir.write("payload.json", samplePayload)
        let result = try await Run.program("/usr/bin/nghttp", ["-nv", "--no-verify-peer", "-d", body, apns.url(token: sampleToken),
                                                         "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app"])
        // nghttp's request is the stream of its HEADERS frame (it opens idle streams for priorities first).
        let headers = try #require(result.stdout.components(separatedBy: "\n").first { $0.contains("send HEADERS frame") })
        let stream = try #require(headers.components(separatedBy: "stream_id=").last?.prefix { $0.isNumber })
        #expect(result.stdout.contains("recv (stream_id=\(stream)) :status: 200"), "\(result.stdout)")
        #expect(result.stdout.contains("recv GOAWAY frame"))
        #expect(result.stdout.contains("(last_stream_id=\(stream), error_code=NO_ERROR(0x00), opaque_data(21)=[{\"reason\":\"Shutdown\"}])"))
    }

    @Test func abruptCloseAfterNStreams() async throws {
        var faults = HTTP2Faults()
        faults.closeAfterStreams = 2
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let body = try dir.write("payload.json", samplePayload)
        let result = try await Run.program("/usr/bin/h2load", ["-n", "6", "-c", "1", "-m", "1", apns.url(token: sampleToken), "-d", body,
                                                         "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app"])
        #expect(result.stdout.contains("2 succeeded"), "\(result.stdout)")
        #expect(apns.simulator.counters.accepted == 2)
        #expect(apns.simulator.counters.abruptCloses == 1)
        #expect(!result.stdout.contains("GOAWAY"))
    }

    @Test func addedLatency() async throws {
        var faults = HTTP2Faults()
        faults.latency = 0.3
        let apns = try HTTP2SimulatorHarness.tokenAuth(faults: faults)
        defer { apns.stop() }
        let r = try await send(apns, tokens: [sampleToken, "zz"])
        #expect(r.map(\.status) == [200, 400])
        #expect(r.allSatisfy { $0.seconds >= 0.3 }, "\(r.map(\.seconds))")
    }

    /// The `SETTINGS_MAX_CONCURRENT_STREAMS` values the server sent, in order, as `nghttp -v` shows them.
    func receivedStreamLimits(_ output: String) -> [String] {
        var limits: [String] = []
        var inServerSettings = false
        for line in output.components(separatedBy: "\n") {
            if line.contains(" frame ") { inServerSettings = line.contains("recv SETTINGS frame") }
            if inServerSettings, let r = line.range(of: "SETTINGS_MAX_CONCURRENT_STREAMS(0x03):") {
                limits.append(String(line[r.upperBound...].prefix { $0 != "]" }))
            }
        }
        return limits
    }

    @Test func maxConcurrentStreamsIsAnnounced() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let body = try dir.write("payload.json", samplePayload)
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.maxConcurrentStreams = 7 }
        defer { apns.stop() }
        let result = try await Run.program("/usr/bin/nghttp", ["-nv", "--no-verify-peer", "-d", body, apns.url(token: sampleToken),
                                                         "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app"])
        // With token auth: one stream until a request carries a valid token, then the limit.
        #expect(receivedStreamLimits(result.stdout) == ["1", "7"], "\(result.stdout)")

        let open = try HTTP2SimulatorHarness.certificateAuth()
        defer { open.stop() }
        let certs = open.certificates
        let cert = try await Run.program("/usr/bin/nghttp", ["-nv", "--no-verify-peer", "--cert", certs.clientCertificate, "--key", certs.clientKey,
                                                       "-d", body, open.url(token: sampleToken), "-H", "apns-topic: com.example.app"])
        #expect(receivedStreamLimits(cert.stdout) == ["1000"], "\(cert.stdout)")
        #expect(cert.stdout.contains(":status: 200"))
    }

    @Test func toleratesCurlResettingEveryStream() async throws {
        // curl 7.88 sends RST_STREAM after each response; nghttp2's default rapid-reset limit
        // would answer with GOAWAY after about 1000 of them.
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.retainsNotifications = false }
        defer { apns.stop() }
        let n = 1500
        let url = apns.url(token: sampleToken)
        let args = ["-s", "-o", "/dev/null", "-w", "%{http_code}\n", "--http2", "--cacert", apns.certificates.caFile,
                    "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app", "--data-binary", samplePayload]
            + Array(repeating: url, count: n)
        let result = try await Run.program(Curl.path, args)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.lines.filter { $0 == "200" }.count == n)
        #expect(apns.simulator.counters.connections == 1)
        #expect(apns.simulator.counters.accepted == n)
    }

    @Test func h2loadWithManyStreams() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth {
            $0.singleStreamUntilAuthenticated = false
            $0.retainsNotifications = false
        }
        defer { apns.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let body = try dir.write("payload.json", samplePayload)
        let result = try await Run.program("/usr/bin/h2load", ["-n", "5000", "-c", "2", "-m", "50", apns.url(token: sampleToken), "-d", body,
                                                         "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app"])
        #expect(result.stdout.contains("5000 succeeded, 0 failed"), "\(result.stdout)")
        #expect(result.stdout.contains("status codes: 5000 2xx"))
        #expect(apns.simulator.counters.accepted == 5000)
        #expect(apns.simulator.counters.connections == 2)
    }

    /// Whether h2load's streams beyond the first are refused depends on when it reads the
    /// SETTINGS; either way none gets an HTTP error (the refusal itself is not forced here).
    @Test func streamsOpenedBeforeAValidTokenGetNoHTTPError() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let body = try dir.write("payload.json", samplePayload)
        // Depending on timing h2load sends its 10 streams before or after it reads the server's
        // SETTINGS (one stream until a valid token). Streams beyond the limit are refused at the
        // HTTP/2 level (RST_STREAM REFUSED_STREAM), never answered with an HTTP error.
        let result = try await Run.program("/usr/bin/h2load", ["-n", "10", "-c", "1", "-m", "10", apns.url(token: sampleToken), "-d", body,
                                                         "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app"])
        let accepted = apns.simulator.counters.accepted
        #expect(accepted >= 1)
        #expect(apns.simulator.counters.requests == accepted)
        #expect(result.stdout.contains("status codes: \(accepted) 2xx, 0 3xx, 0 4xx, 0 5xx"), "\(result.stdout)")
    }

    @Test func recordsJSONLines() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let file = dir.file("received.jsonl")
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.recordFile = file }
        defer { apns.stop() }
        let jwt = try apns.jwt()
        let r = try await send(apns, tokens: [sampleToken, "zz", Self.other], extra: ["-H", "apns-push-type: alert"])
        #expect(r.map(\.status) == [200, 400, 200])
        let text = try String(contentsOfFile: file, encoding: .utf8)
        #expect(!text.contains(jwt))
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        let first = try JSONValue.parse(lines[0])
        #expect(first["token"]?.stringValue == sampleToken)
        #expect(first["topic"]?.stringValue == "com.example.app")
        #expect(first["pushType"]?.stringValue == "alert")
        #expect(first["connection"]?.intValue == 1)
        #expect(first["apnsId"]?.stringValue == r[0].headers["apns-id"])
        #expect(first["payload"]?["aps"]?["alert"]?.stringValue == "hello")
        #expect(first["headers"]?["apns-topic"]?.stringValue == "com.example.app")
        #expect(first["headers"]?["authorization"]?.stringValue == "<redacted>")
        #expect(first["keyId"]?.stringValue == apns.certificates.authKeyID)
        #expect(first["time"]?.stringValue?.hasSuffix("Z") == true)
        let counters = apns.simulator.counters
        #expect(counters.accepted == 2)
        #expect(counters.rejected == ["BadDeviceToken": 1])
        #expect(counters.summary.contains("accepted 2, rejected 1 (BadDeviceToken 1)"))
    }

    @Test func stopClosesConnectionsAndThePort() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        let port = apns.port
        #expect(port > 0)
        #expect(try await send(apns, tokens: [sampleToken]).first?.status == 200)
        apns.stop()
        let after = try await Run.program(Curl.path, ["-s", "--http2", "--cacert", apns.certificates.caFile, "-d", "{}",
                                                "https://127.0.0.1:\(port)/3/device/\(sampleToken)"])
        #expect(after.status == 7)  // could not connect
    }
}
