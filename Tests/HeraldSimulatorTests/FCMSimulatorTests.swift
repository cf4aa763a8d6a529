import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

/// A started FCM simulator with one registered service account and its signing key.
struct FCMSimulatorFixture {
    let simulator: FCMSimulator
    let certificates: TestCertificates
    let account: FCMServiceAccount
    let key: RS256SigningKey
    let clock: TestClock

    init(_ configure: (inout FCMSimulator.Configuration) -> Void = { _ in }) throws {
        certificates = try TestCertificates.shared()
        clock = TestClock(start: Date())
        var c = FCMSimulator.Configuration(tls: .init(certificateFile: certificates.serverCertificate, keyFile: certificates.serverKey))
        c.clock = clock
        configure(&c)
        simulator = try FCMSimulator(configuration: c)
        try simulator.start()
        let made = try simulator.makeServiceAccount(key: TestKeys.rsa)
        account = made.account
        let json = try JSONValue.parse(made.json)
        key = try RS256SigningKey(pem: json["private_key"]!.stringValue!)
    }

    func stop() { simulator.stop() }

    /// An assertion as Google's libraries make it; `edit` changes the claims.
    func assertion(_ edit: (inout JWTClaims) -> Void = { _ in }, key other: RS256SigningKey? = nil, keyID: String? = nil) throws -> String {
        let iat = Int(clock.now.timeIntervalSince1970) - 10
        var claims: JWTClaims = ["iss": .string(account.clientEmail), "scope": "https://www.googleapis.com/auth/firebase.messaging",
                                 "aud": .string(simulator.tokenURI), "iat": .number(Double(iat)), "exp": .number(Double(iat + 3600))]
        edit(&claims)
        return try JWT.sign(claims, key: other ?? key, keyID: keyID ?? account.privateKeyID)
    }

    /// POSTs the assertion to the token endpoint.
    func token(_ assertion: String, grant: String = "urn:ietf:params:oauth:grant-type:jwt-bearer") async throws -> CurlResponse {
        try await Curl.one(simulator.tokenURI, ["-H", "content-type: application/x-www-form-urlencoded",
                                          "--data-urlencode", "grant_type=\(grant)", "--data-urlencode", "assertion=\(assertion)"],
                     caFile: certificates.caFile)
    }

    /// A live access token.
    func accessToken() async throws -> String {
        let r = try await token(try assertion())
        guard let t = r.json?["access_token"]?.stringValue else { throw TestSetupError("no access token: \(r.body)") }
        return t
    }

    /// POSTs a send body.
    func send(_ body: String, accessToken: String?, project: String? = nil) async throws -> CurlResponse {
        var args = ["-H", "content-type: application/json", "--data-binary", body]
        if let accessToken { args += ["-H", "authorization: Bearer \(accessToken)"] }
        return try await Curl.one(simulator.baseURL + "/v1/projects/\(project ?? account.projectID)/messages:send", args, caFile: certificates.caFile)
    }
}

let fcmToken = "fcm-device-1:APA91b" + String(repeating: "Hk3_-x", count: 22)

extension CurlResponse {
    var googleStatus: String? { json?["error"]?["status"]?.stringValue }
    var fcmErrorCode: String? {
        json?["error"]?["details"]?.arrayValue?.first { $0["@type"]?.stringValue?.hasSuffix("FcmError") == true }?["errorCode"]?.stringValue
    }
    var violationField: String? {
        json?["error"]?["details"]?.arrayValue?.first { $0["@type"]?.stringValue?.hasSuffix("BadRequest") == true }?["fieldViolations"]?
            .arrayValue?.first?["field"]?.stringValue
    }
}

@Suite("FCM simulator: the token endpoint")
struct FCMSimulatorTokenTests {
    @Test func aGoodAssertionGetsABearerToken() async throws {
        let fcm = try FCMSimulatorFixture()
        defer { fcm.stop() }
        let r = try await fcm.token(try fcm.assertion())
        #expect(r.status == 200, "\(r.body)")
        #expect(r.json?["token_type"]?.stringValue == "Bearer")
        #expect(r.json?["expires_in"] == .number(3599))
        #expect(r.json?["access_token"]?.stringValue?.hasPrefix("ya29.") == true)
        #expect(fcm.simulator.counters.accessTokensIssued == 1)
    }

    @Test func expiresInCanBeAString() async throws {
        let fcm = try FCMSimulatorFixture { $0.expiresInAsString = true; $0.accessTokenLifetime = 120 }
        defer { fcm.stop() }
        #expect(try await fcm.token(try fcm.assertion()).json?["expires_in"] == .string("120"))
    }

    struct Refusal: CustomStringConvertible, Sendable {
        var name: String
        var error: String
        var make: @Sendable (FCMSimulatorFixture) throws -> String
        var description: String { name }
    }

    static let refusals: [Refusal] = [
        Refusal(name: "another key signed it", error: "invalid_grant") { try $0.assertion(key: TestKeys.otherRSA) },
        Refusal(name: "another kid", error: "invalid_grant") { try $0.assertion(keyID: "0000") },
        Refusal(name: "unknown account", error: "invalid_grant") { try $0.assertion { $0["iss"] = "nobody@x.iam.gserviceaccount.com" } },
        Refusal(name: "wrong audience", error: "invalid_grant") { try $0.assertion { $0["aud"] = "https://oauth2.googleapis.com/token" } },
        Refusal(name: "no scope", error: "invalid_scope") { try $0.assertion { $0["scope"] = nil } },
        Refusal(name: "another scope", error: "invalid_scope") { try $0.assertion { $0["scope"] = "https://www.googleapis.com/auth/userinfo.email" } },
        Refusal(name: "longer than an hour", error: "invalid_grant") { f in
            try f.assertion { $0["exp"] = .number(f.clock.now.timeIntervalSince1970 + 7200) }
        },
        Refusal(name: "expired", error: "invalid_grant") { f in
            try f.assertion { $0["iat"] = .number(f.clock.now.timeIntervalSince1970 - 4000); $0["exp"] = .number(f.clock.now.timeIntervalSince1970 - 400) }
        },
        Refusal(name: "issued in the future", error: "invalid_grant") { f in
            try f.assertion { $0["iat"] = .number(f.clock.now.timeIntervalSince1970 + 900); $0["exp"] = .number(f.clock.now.timeIntervalSince1970 + 1800) }
        },
        Refusal(name: "not a JWT", error: "invalid_grant") { _ in "not.a.jwt" },
    ]

    @Test(arguments: refusals)
    func badAssertionsAreRefusedAsGoogleDoes(_ c: Refusal) async throws {
        let fcm = try FCMSimulatorFixture()
        defer { fcm.stop() }
        let r = try await fcm.token(try c.make(fcm))
        #expect(r.status == 400, "\(r.body)")
        #expect(r.json?["error"]?.stringValue == c.error, "\(r.body)")
        #expect(r.json?["error_description"]?.stringValue?.isEmpty == false)
        #expect(fcm.simulator.counters.accessTokensIssued == 0)
    }

    @Test func otherGrantsAndTheInvalidGrantFault() async throws {
        let fcm = try FCMSimulatorFixture()
        defer { fcm.stop() }
        #expect(try await fcm.token(try fcm.assertion(), grant: "client_credentials").json?["error"]?.stringValue == "unsupported_grant_type")
        fcm.simulator.updateFaults { $0.tokenEndpointUnavailable = 1 }
        #expect(try await fcm.token(try fcm.assertion()).status == 503)
        #expect(try await fcm.token(try fcm.assertion()).status == 200)
        fcm.simulator.updateFaults { $0.invalidGrant = true }
        let r = try await fcm.token(try fcm.assertion())
        #expect(r.status == 400 && r.json?["error"]?.stringValue == "invalid_grant")
    }
}

@Suite("FCM simulator: messages:send")
struct FCMSimulatorSendTests {
    struct Case: CustomStringConvertible, Sendable {
        var name: String
        var body: String
        var status: Int
        var googleStatus: String? = nil
        var fcmError: String? = nil
        var field: String? = nil
        var description: String { name }
    }

    static let t = fcmToken
    static let cases: [Case] = [
        Case(name: "a notification", body: #"{"message":{"token":"\#(t)","notification":{"title":"Hi","body":"there"}}}"#, status: 200),
        Case(name: "camelCase names", body: #"{"validateOnly":false,"message":{"token":"\#(t)","android":{"collapseKey":"c","ttl":"3.5s","directBootOk":true}}}"#, status: 200),
        Case(name: "data-only with android priority", body: #"{"message":{"token":"\#(t)","data":{"a":"1"},"android":{"priority":"high","ttl":"60s"}}}"#, status: 200),
        Case(name: "a topic", body: #"{"message":{"topic":"news","data":{"a":"1"}}}"#, status: 200),
        Case(name: "no target", body: #"{"message":{"data":{"a":"1"}}}"#, status: 400, googleStatus: "INVALID_ARGUMENT", field: "message"),
        Case(name: "two targets", body: #"{"message":{"token":"\#(t)","topic":"news"}}"#, status: 400, googleStatus: "INVALID_ARGUMENT", field: "message"),
        Case(name: "a number in data", body: #"{"message":{"token":"\#(t)","data":{"n":12}}}"#, status: 400, googleStatus: "INVALID_ARGUMENT", field: "message.data[0].value"),
        Case(name: "reserved key from", body: #"{"message":{"token":"\#(t)","data":{"from":"x"}}}"#, status: 400, field: "message.data.from"),
        Case(name: "reserved key google.x", body: #"{"message":{"token":"\#(t)","data":{"google.x":"x"}}}"#, status: 400, field: "message.data.google.x"),
        Case(name: "an unknown field", body: #"{"message":{"token":"\#(t)","android":{"colour":"red"}}}"#, status: 400, field: "message.android"),
        Case(name: "an unknown top-level field", body: #"{"message":{"token":"\#(t)"},"dry_run":true}"#, status: 400, googleStatus: "INVALID_ARGUMENT"),
        Case(name: "ttl in hours", body: #"{"message":{"token":"\#(t)","android":{"ttl":"1h"}}}"#, status: 400, field: "message.android.ttl"),
        Case(name: "ttl as a number", body: #"{"message":{"token":"\#(t)","android":{"ttl":60}}}"#, status: 400, field: "message.android.ttl"),
        Case(name: "priority urgent", body: #"{"message":{"token":"\#(t)","android":{"priority":"urgent"}}}"#, status: 400, field: "message.android.priority"),
        Case(name: "a bad token", body: #"{"message":{"token":"not a token"}}"#, status: 400, googleStatus: "INVALID_ARGUMENT", fcmError: "INVALID_ARGUMENT"),
        Case(name: "not JSON", body: #"{"message":"#, status: 400, googleStatus: "INVALID_ARGUMENT"),
    ]

    @Test(arguments: cases)
    func checksWhatGoogleChecks(_ c: Case) async throws {
        let fcm = try FCMSimulatorFixture()
        defer { fcm.stop() }
        let r = try await fcm.send(c.body, accessToken: try fcm.accessToken())
        #expect(r.status == c.status, "\(r.body)")
        if c.status == 200 {
            #expect(r.json?["name"]?.stringValue?.hasPrefix("projects/\(fcm.account.projectID)/messages/0:") == true, "\(r.body)")
            #expect(fcm.simulator.received.count == 1)
        } else {
            #expect(r.json?["error"]?["code"]?.intValue == c.status)
            if let s = c.googleStatus { #expect(r.googleStatus == s, "\(r.body)") }
            if let e = c.fcmError { #expect(r.fcmErrorCode == e, "\(r.body)") }
            if let f = c.field { #expect(r.violationField == f, "\(r.body)") }
            #expect(fcm.simulator.received.isEmpty)
        }
    }

    @Test func theMessageLimitIs4096BytesAtTheByte() async throws {
        let fcm = try FCMSimulatorFixture()
        defer { fcm.stop() }
        let access = try await fcm.accessToken()
        func message(_ n: Int) -> String { #"{"token":"\#(fcmToken)","data":{"k":"\#(String(repeating: "x", count: n))"}}"# }
        // The target does not count: 4096 bytes of {"data":{"k":"xx…"}}.
        let fits = 4096 - #"{"data":{"k":""}}"#.utf8.count
        #expect(try await fcm.send(#"{"message":\#(message(fits))}"#, accessToken: access).status == 200)
        let r = try await fcm.send(#"{"message":\#(message(fits + 1))}"#, accessToken: access)
        #expect(r.status == 400 && r.fcmErrorCode == "INVALID_ARGUMENT" && r.text.contains("too big"), "\(r.body)")
        #expect(fcm.simulator.received.first?.bytes == 4096)
    }

    @Test func accessTokensProjectsAndValidateOnly() async throws {
        let fcm = try FCMSimulatorFixture { $0.accessTokenLifetime = 60 }
        defer { fcm.stop() }
        let body = #"{"message":{"token":"\#(fcmToken)"}}"#
        var r = try await fcm.send(body, accessToken: nil)
        #expect(r.status == 401 && r.googleStatus == "UNAUTHENTICATED" && r.headers["www-authenticate"] != nil)
        #expect(try await fcm.send(body, accessToken: "ya29.made-up").status == 401)
        let access = try await fcm.accessToken()
        r = try await fcm.send(body, accessToken: access, project: "someone-else")
        #expect(r.status == 403 && r.googleStatus == "PERMISSION_DENIED")
        r = try await fcm.send(#"{"validate_only":true,"message":{"token":"\#(fcmToken)"}}"#, accessToken: access)
        #expect(r.json?["name"]?.stringValue == "projects/\(fcm.account.projectID)/messages/fake_message_id")
        #expect(fcm.simulator.received.first?.validateOnly == true)
        #expect(fcm.simulator.counters.validateOnly == 1)
        fcm.clock.advance(by: 61)
        #expect(try await fcm.send(body, accessToken: access).status == 401)
    }

    @Test func faultsAnswerWithFcmErrorDetails() async throws {
        let fcm = try FCMSimulatorFixture()
        defer { fcm.stop() }
        let a = "a" + fcmToken, b = "b" + fcmToken, c = "c" + fcmToken, d = "d" + fcmToken
        fcm.simulator.updateFaults { f in
            f.unregisteredTokens = [a]
            f.invalidTokens = [b]
            f.senderMismatchTokens = [c]
            f.thirdPartyAuthErrorTokens = [d]
        }
        let access = try await fcm.accessToken()
        func send(_ token: String) async throws -> CurlResponse { try await fcm.send(#"{"message":{"token":"\#(token)"}}"#, accessToken: access) }
        var r = try await send(a)
        #expect(r.status == 404 && r.googleStatus == "NOT_FOUND" && r.fcmErrorCode == "UNREGISTERED", "\(r.body)")
        r = try await send(b)
        #expect(r.status == 400 && r.fcmErrorCode == "INVALID_ARGUMENT" && r.text.contains("registration token"))
        r = try await send(c)
        #expect(r.status == 403 && r.fcmErrorCode == "SENDER_ID_MISMATCH")
        r = try await send(d)
        #expect(r.status == 401 && r.fcmErrorCode == "THIRD_PARTY_AUTH_ERROR")

        fcm.simulator.updateFaults { f in
            f.unauthenticatedSends = 1
            f.quotaExceeded = 2
            f.quotaRetryAfter = 30
            f.internalErrors = 1
            f.unavailable = 1
            f.serverErrorRetryAfter = 5
        }
        let ok = "e" + fcmToken
        r = try await send(ok)
        #expect(r.status == 401 && r.fcmErrorCode == nil)
        r = try await send(ok)
        #expect(r.status == 429 && r.fcmErrorCode == "QUOTA_EXCEEDED" && r.headers["retry-after"] == "30")
        fcm.simulator.updateFaults { $0.quotaRetryAfter = nil }
        r = try await send(ok)
        #expect(r.status == 429 && r.headers["retry-after"] == nil)
        r = try await send(ok)
        #expect(r.status == 500 && r.fcmErrorCode == "INTERNAL" && r.headers["retry-after"] == "5")
        r = try await send(ok)
        #expect(r.status == 503 && r.fcmErrorCode == "UNAVAILABLE" && r.headers["retry-after"] == "5")
        #expect(try await send(ok).status == 200)
        #expect(fcm.simulator.counters.errors["QUOTA_EXCEEDED"] == 2)
    }

    @Test func recordsAcceptedSendsWithoutTheAccessToken() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fcm = try FCMSimulatorFixture { $0.recordFile = dir.file("record.jsonl") }
        defer { fcm.stop() }
        let access = try await fcm.accessToken()
        #expect(try await fcm.send(#"{"message":{"token":"\#(fcmToken)","data":{"herald_id":"n1"}}}"#, accessToken: access).status == 200)
        fcm.stop()
        let text = try String(contentsOfFile: dir.file("record.jsonl"), encoding: .utf8)
        let line = try JSONValue.parse(String(text.split(separator: "\n").first ?? ""))
        #expect(line["token"]?.stringValue == fcmToken)
        #expect(line["message"]?["data"]?["herald_id"]?.stringValue == "n1")
        #expect(!text.contains(access))
    }
}

extension CurlResponse {
    var text: String { body }
}
