import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing

/// The HTTP/2 simulator as a real server, against `curl --http2` over TLS (ALPN h2) with
/// provider tokens made by `openssl`: every rule answers with Apple's status and reason.
@Suite("HTTP/2 simulator over TLS with curl")
struct HTTP2SimulatorTests {
    /// One request and the answer Apple documents for it.
    struct Case: CustomStringConvertible, Sendable {
        var name: String
        var method: String? = nil
        var path: String = "/3/device/\(sampleToken)"
        var headers: [String] = ["apns-topic: com.example.app"]
        var body: String? = samplePayload
        var payloadBytes: Int? = nil
        var status: Int
        var reason: String?
        var description: String { name }
    }

    static let cases: [Case] = [
        Case(name: "valid alert", status: 200, reason: nil),
        Case(name: "GET", method: "GET", body: nil, status: 405, reason: "MethodNotAllowed"),
        Case(name: "DELETE", method: "DELETE", body: nil, status: 405, reason: "MethodNotAllowed"),
        Case(name: "bad path", path: "/3/devices/\(sampleToken)", status: 404, reason: "BadPath"),
        Case(name: "old API version", path: "/2/device/\(sampleToken)", status: 404, reason: "BadPath"),
        Case(name: "no token", path: "/3/device/", status: 400, reason: "MissingDeviceToken"),
        Case(name: "non-hex token", path: "/3/device/zz" + sampleToken.dropFirst(2), status: 400, reason: "BadDeviceToken"),
        Case(name: "odd-length token", path: "/3/device/abc", status: 400, reason: "BadDeviceToken"),
        Case(name: "bad apns-id", headers: ["apns-topic: com.example.app", "apns-id: 12345"], status: 400, reason: "BadMessageId"),
        Case(name: "no topic", headers: [], status: 400, reason: "MissingTopic"),
        Case(name: "malformed topic", headers: ["apns-topic: com.example/app"], status: 400, reason: "BadTopic"),
        Case(name: "voip without .voip", headers: ["apns-topic: com.example.app", "apns-push-type: voip"], status: 400, reason: "BadTopic"),
        Case(name: "alert on a .voip topic", headers: ["apns-topic: com.example.app.voip", "apns-push-type: alert"], status: 400, reason: "BadTopic"),
        Case(name: "liveactivity suffix", headers: ["apns-topic: com.example.app.push-type.liveactivity", "apns-push-type: liveactivity"],
             body: #"{"aps":{"event":"update","timestamp":1790000000,"content-state":{"score":1}}}"#, status: 200, reason: nil),
        Case(name: "liveactivity without its rules", headers: ["apns-topic: com.example.app.push-type.liveactivity", "apns-push-type: liveactivity"],
             status: 400, reason: "BadLiveActivityPayload"),
        Case(name: "liveactivity start without alert", headers: ["apns-topic: com.example.app.push-type.liveactivity", "apns-push-type: liveactivity"],
             body: #"{"aps":{"event":"start","timestamp":1790000000,"content-state":{},"attributes-type":"Match","attributes":{}}}"#,
             status: 400, reason: "BadLiveActivityPayload"),
        Case(name: "pushtotalk suffix", headers: ["apns-topic: com.example.app.voip-ptt", "apns-push-type: pushtotalk"], status: 200, reason: nil),
        Case(name: "fileprovider suffix", headers: ["apns-topic: com.example.app.pushkit.fileprovider", "apns-push-type: fileprovider"], status: 200, reason: nil),
        Case(name: "location wrong suffix", headers: ["apns-topic: com.example.app.location", "apns-push-type: location"], status: 400, reason: "BadTopic"),
        Case(name: "widgets suffix", headers: ["apns-topic: com.example.app.push-type.widgets", "apns-push-type: widgets"], status: 200, reason: nil),
        Case(name: "controls without suffix", headers: ["apns-topic: com.example.app", "apns-push-type: controls"], status: 400, reason: "BadTopic"),
        Case(name: "complication suffix", headers: ["apns-topic: com.example.app.complication", "apns-push-type: complication"], status: 200, reason: nil),
        Case(name: "another team's bundle", headers: ["apns-topic: com.other.app"], status: 400, reason: "TopicDisallowed"),
        Case(name: "unknown push type", headers: ["apns-topic: com.example.app", "apns-push-type: banana"], status: 400, reason: "InvalidPushType"),
        Case(name: "priority 3", headers: ["apns-topic: com.example.app", "apns-priority: 3"], status: 400, reason: "BadPriority"),
        Case(name: "priority 1", headers: ["apns-topic: com.example.app", "apns-priority: 1"], status: 200, reason: nil),
        Case(name: "background with priority 10", headers: ["apns-topic: com.example.app", "apns-push-type: background", "apns-priority: 10"],
             body: #"{"aps":{"content-available":1}}"#, status: 400, reason: "BadPriority"),
        Case(name: "background with priority 5", headers: ["apns-topic: com.example.app", "apns-push-type: background", "apns-priority: 5"],
             body: #"{"aps":{"content-available":1}}"#, status: 200, reason: nil),
        Case(name: "bad expiration", headers: ["apns-topic: com.example.app", "apns-expiration: tomorrow"], status: 400, reason: "BadExpirationDate"),
        Case(name: "expiration 0", headers: ["apns-topic: com.example.app", "apns-expiration: 0"], status: 200, reason: nil),
        Case(name: "collapse id of 65 bytes", headers: ["apns-topic: com.example.app", "apns-collapse-id: " + String(repeating: "c", count: 65)],
             status: 400, reason: "BadCollapseId"),
        Case(name: "collapse id of 64 bytes", headers: ["apns-topic: com.example.app", "apns-collapse-id: " + String(repeating: "c", count: 64)],
             status: 200, reason: nil),
        Case(name: "repeated apns-priority", headers: ["apns-topic: com.example.app", "apns-priority: 10", "apns-priority: 5"],
             status: 400, reason: "DuplicateHeaders"),
        Case(name: "empty payload", body: "", status: 400, reason: "PayloadEmpty"),
        Case(name: "4096-byte payload", body: nil, payloadBytes: 4096, status: 200, reason: nil),
        Case(name: "4097-byte payload", body: nil, payloadBytes: 4097, status: 413, reason: "PayloadTooLarge"),
        Case(name: "5120-byte voip payload", headers: ["apns-topic: com.example.app.voip", "apns-push-type: voip"], body: nil,
             payloadBytes: 5120, status: 200, reason: nil),
        Case(name: "5121-byte voip payload", headers: ["apns-topic: com.example.app.voip", "apns-push-type: voip"], body: nil,
             payloadBytes: 5121, status: 413, reason: "PayloadTooLarge"),
    ]

    @Test(arguments: cases)
    func answersAsApple(_ c: Case) async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.topics = ["com.example.app"] }
        defer { apns.stop() }
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        var args = ["-H", "authorization: bearer \(try apns.jwt())"]
        for h in c.headers { args += ["-H", h] }
        if let method = c.method { args += ["-X", method] }
        if let body = c.body { args += ["--data-binary", body] }
        if let n = c.payloadBytes { args += ["--data-binary", "@" + (try payloadFile(dir, bytes: n))] }
        let r = try await Curl.one(apns.baseURL + c.path, args, caFile: apns.certificates.caFile)
        #expect(r.status == c.status)
        let id = try #require(r.headers["apns-id"])
        #expect(id.count == 36 && id == id.lowercased())
        if let reason = c.reason {
            #expect(r.body == #"{"reason":"\#(reason)"}"#)
            #expect(r.headers["content-type"] == "application/json")
            #expect(apns.simulator.received.isEmpty)
            #expect(apns.simulator.counters.rejected == [reason: 1])
        } else {
            #expect(r.body.isEmpty)
            #expect(r.headers["apns-unique-id"] != nil)
            #expect(apns.simulator.received.count == 1)
        }
    }

    @Test func successEchoesApnsIDAndRecordsTheNotification() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let id = "123e4567-e89b-12d3-a456-426655440000"
        let r = try await Curl.one(apns.url(token: sampleToken), [
            "-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app", "-H", "apns-id: \(id)",
            "-H", "apns-push-type: alert", "-H", "apns-priority: 5", "-H", "apns-expiration: 1767225600",
            "-H", "apns-collapse-id: news", "--data-binary", samplePayload,
        ], caFile: apns.certificates.caFile)
        #expect(r.status == 200)
        #expect(r.headers["apns-id"] == id)
        let unique = try #require(r.headers["apns-unique-id"])
        #expect(UUID(uuidString: unique) != nil && unique == unique.lowercased())
        let n = try #require(apns.simulator.received.first)
        #expect(n.deviceToken == sampleToken)
        #expect(n.topic == "com.example.app")
        #expect(n.pushType == .alert)
        #expect(n.apnsID == id)
        #expect(n.uniqueID == unique)
        #expect(n.priority == 5)
        #expect(n.expiration == 1_767_225_600)
        #expect(n.collapseID == "news")
        #expect(n.payloadString == samplePayload)
        #expect(n.keyID == apns.certificates.authKeyID)
        #expect(n.teamID == apns.certificates.teamID)
        #expect(n.connectionID == 1)
        #expect(n.header("authorization") == "<redacted>")
        #expect(n.header(":method") == "POST")
    }

    @Test func errorsEchoTheRequestsApnsID() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let id = "123e4567-e89b-12d3-a456-426655440000"
        let r = try await Curl.one(apns.url(token: "zz"), ["-H", "authorization: bearer \(try apns.jwt())", "-H", "apns-topic: com.example.app",
                                                     "-H", "apns-id: \(id)", "--data-binary", samplePayload], caFile: apns.certificates.caFile)
        #expect(r.status == 400)
        #expect(r.headers["apns-id"] == id)
        #expect(r.headers["apns-unique-id"] == nil)
    }

    @Test func headGetsA405WithoutBody() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let result = try await Run.program(Curl.path, ["-s", "-S", "-I", "--http2", "--cacert", apns.certificates.caFile,
                                                 "-H", "authorization: bearer \(try apns.jwt())", apns.url(token: sampleToken)])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("HTTP/2 405"))
        #expect(apns.simulator.counters.rejected == ["MethodNotAllowed": 1])
    }

    @Test func productionSendsNoUniqueID() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.environment = .production }
        defer { apns.stop() }
        let r = try await Curl.one(apns.url(token: sampleToken), ["-H", "authorization: bearer \(try apns.jwt())",
                                                            "-H", "apns-topic: com.example.app", "--data-binary", samplePayload],
                             caFile: apns.certificates.caFile)
        #expect(r.status == 200)
        #expect(r.headers["apns-unique-id"] == nil)
        #expect(r.headers["apns-id"] != nil)
    }

    // MARK: Token authentication

    func post(_ apns: HTTP2SimulatorHarness, authorization: String?) async throws -> CurlResponse {
        var args = ["-H", "apns-topic: com.example.app", "--data-binary", samplePayload]
        if let authorization { args += ["-H", "authorization: \(authorization)"] }
        return try await Curl.one(apns.url(token: sampleToken), args, caFile: apns.certificates.caFile)
    }

    @Test func missingProviderToken() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        for auth in [nil, "bearer", "basic dXNlcjpwYXNz"] as [String?] {
            let r = try await post(apns, authorization: auth)
            #expect(r.status == 403)
            #expect(r.reason == "MissingProviderToken")
        }
    }

    @Test func invalidProviderToken() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let certs = apns.certificates
        let good = try apns.jwt()
        let bad = [
            "bearer garbage",
            "bearer " + good.dropLast(4) + (good.hasSuffix("AAAA") ? "BBBB" : "AAAA"),     // signature does not match
            "bearer " + (try apns.jwt(keyID: "UNKNOWNKEY")),                              // unknown key
            "bearer " + (try apns.jwt(teamID: "OTHERTEAM1")),                             // wrong team
            "bearer " + (try TestJWT.make(keyFile: certs.clientKey, keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: Date())),
            "bearer " + (try TestJWT.make(keyFile: certs.authKey, keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: Date(),
                                          header: #"{"alg":"ES384","kid":"ABC123DEFG"}"#)),
        ]
        for auth in bad {
            let r = try await post(apns, authorization: auth)
            #expect(r.status == 403, "\(auth.prefix(40))")
            #expect(r.reason == "InvalidProviderToken", "\(auth.prefix(40))")
        }
        #expect(apns.simulator.counters.rejected == ["InvalidProviderToken": bad.count])
    }

    @Test func expiredProviderToken() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let r = try await post(apns, authorization: "bearer " + (try apns.jwt(issuedAt: Date().addingTimeInterval(-3601))))
        #expect(r.status == 403)
        #expect(r.reason == "ExpiredProviderToken")
        let fresh = try await post(apns, authorization: "bearer " + (try apns.jwt(issuedAt: Date().addingTimeInterval(-3000))))
        #expect(fresh.status == 200)
    }

    @Test func expiryFollowsTheInjectedClock() async throws {
        let clock = TestClock()
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.clock = clock }
        defer { apns.stop() }
        let jwt = try apns.jwt(issuedAt: clock.now)
        #expect(try await post(apns, authorization: "bearer \(jwt)").status == 200)
        clock.advance(by: 3601)
        let r = try await post(apns, authorization: "bearer \(jwt)")
        #expect(r.status == 403)
        #expect(r.reason == "ExpiredProviderToken")
        #expect(apns.simulator.received.first?.time == clock.now.addingTimeInterval(-3601))
    }

    @Test func tooManyProviderTokenUpdatesOnOneConnection() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let first = try apns.jwt(issuedAt: Date())
        let second = try apns.jwt(issuedAt: Date().addingTimeInterval(-10))
        let request = { (jwt: String) in
            Curl.Request(apns.url(token: sampleToken), ["-H", "authorization: bearer \(jwt)", "-H", "apns-topic: com.example.app",
                                                         "--data-binary", samplePayload])
        }
        let r = try await Curl.run([request(first), request(second), request(first)], caFile: apns.certificates.caFile)
        #expect(r.responses.map(\.status) == [200, 429, 200])
        #expect(r.responses[1].reason == "TooManyProviderTokenUpdates")
        #expect(apns.simulator.counters.connections == 1)
        // A new connection may start with the other token.
        #expect(try await post(apns, authorization: "bearer \(second)").status == 200)
    }

    @Test func tokenUpdateWindowIsConfigurable() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth { $0.tokenUpdateInterval = 0 }
        defer { apns.stop() }
        let request = { (jwt: String) in
            Curl.Request(apns.url(token: sampleToken), ["-H", "authorization: bearer \(jwt)", "-H", "apns-topic: com.example.app",
                                                         "--data-binary", samplePayload])
        }
        let r = try await Curl.run([request(try apns.jwt(issuedAt: Date())), request(try apns.jwt(issuedAt: Date().addingTimeInterval(-10)))],
                             caFile: apns.certificates.caFile)
        #expect(r.responses.map(\.status) == [200, 200])
        #expect(apns.simulator.counters.connections == 1)
    }

    // MARK: Certificate authentication

    @Test func certificateAuthentication() async throws {
        let apns = try HTTP2SimulatorHarness.certificateAuth()
        defer { apns.stop() }
        let certs = apns.certificates
        let client = ["--cert", certs.clientCertificate, "--key", certs.clientKey, "--data-binary", samplePayload]
        #expect(try await Curl.one(apns.url(token: sampleToken), client + ["-H", "apns-topic: com.example.app"], caFile: certs.caFile).status == 200)
        let voip = try await Curl.one(apns.url(token: sampleToken), client + ["-H", "apns-topic: com.example.app.voip", "-H", "apns-push-type: voip"],
                                caFile: certs.caFile)
        #expect(voip.status == 200)
        // The test certificate lists three topics, so apns-topic is required…
        let missing = try await Curl.one(apns.url(token: sampleToken), client, caFile: certs.caFile)
        #expect(missing.status == 400)
        #expect(missing.reason == "MissingTopic")
        // …and must be one of them.
        let other = try await Curl.one(apns.url(token: sampleToken), client + ["-H", "apns-topic: com.other.app"], caFile: certs.caFile)
        #expect(other.status == 400)
        #expect(other.reason == "TopicDisallowed")
        // The authorization header is ignored on a certificate connection.
        #expect(try await Curl.one(apns.url(token: sampleToken), client + ["-H", "apns-topic: com.example.app", "-H", "authorization: bearer junk"],
                             caFile: certs.caFile).status == 200)
        #expect(apns.simulator.received.count == 3)
        #expect(apns.simulator.received.allSatisfy { $0.keyID == nil })
    }

    @Test func certificateWithOneConfiguredTopicMakesTheTopicOptional() async throws {
        let apns = try HTTP2SimulatorHarness.certificateAuth { $0.topics = ["com.example.app"] }
        defer { apns.stop() }
        let certs = apns.certificates
        let r = try await Curl.one(apns.url(token: sampleToken), ["--cert", certs.clientCertificate, "--key", certs.clientKey,
                                                            "--data-binary", samplePayload], caFile: certs.caFile)
        #expect(r.status == 200)
        #expect(apns.simulator.received.first?.topic == "com.example.app")
    }

    @Test func clientsWithoutATrustedCertificateAreRefused() async throws {
        let apns = try HTTP2SimulatorHarness.certificateAuth()
        defer { apns.stop() }
        let certs = apns.certificates
        let none = try await Curl.run([.init(apns.url(token: sampleToken), ["--data-binary", samplePayload])], caFile: certs.caFile)
        #expect(none.status != 0)
        #expect(none.responses.isEmpty)
        let other = try await Curl.run([.init(apns.url(token: sampleToken), ["--cert", certs.otherClientCertificate, "--key", certs.otherClientKey,
                                                                       "--data-binary", samplePayload])], caFile: certs.caFile)
        #expect(other.status != 0)
        #expect(other.responses.isEmpty)
        #expect(apns.simulator.counters.requests == 0)
    }

    @Test func onlyH2IsSpoken() async throws {
        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        let result = try await Run.program(Curl.path, ["-s", "--http1.1", "--cacert", apns.certificates.caFile, "-d", "{}", apns.url(token: sampleToken)])
        #expect(result.status != 0)  // ALPN offers only http/1.1: the handshake fails
        #expect(apns.simulator.counters.requests == 0)
    }
}
