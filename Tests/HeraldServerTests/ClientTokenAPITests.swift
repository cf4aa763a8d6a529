import Foundation
import HeraldCore
import HeraldCrypto
@testable import HeraldServer
import HeraldTestKit
import Testing

/// `POST /v1/client-tokens` through the real daemon, and the client-token check streams use.
@Suite(.serialized, .stopsDaemons) struct ClientTokenAPITests {
    static let secret = "server-client-secret-0123456789abcdef-000"
    static let device = "0123456789abcdef0123456789abcdef"

    static func config() -> String {
        TestDaemon.configJSON().replacingOccurrences(
            of: #""apps": {"com.example.app": {"routes": ["t"]}"#,
            with: #""apps": {"com.example.app": {"routes": ["t"], "clientSecret": "\#(secret)"}"#)
    }

    @Test func mintedTokenVerifiesWithTheAppSecret() async throws {
        let d = try await TestDaemon.start(config: Self.config())
        let before = Date()
        let r = try await d.client.post("/v1/client-tokens",
                                        #"{"app":"com.example.app","user":"alice","device":"<\#(Self.device.uppercased())>","ttl":600}"#)
        #expect(r.status == 201, "\(r)")
        #expect(r.headers["cache-control"] == "no-store")
        let token = try #require(r.json?["token"]?.stringValue)
        let claims = try ClientToken.verify(token, secret: Secret(Self.secret), app: "com.example.app", now: Date())
        #expect(claims.user == "alice")
        #expect(claims.device == Self.device)
        #expect(claims.expiresAt.timeIntervalSince(claims.issuedAt) == 600)
        #expect(claims.issuedAt.timeIntervalSince1970 >= before.timeIntervalSince1970.rounded(.down))
        #expect(r.json?["expires_at"]?.stringValue == claims.expiresAt.iso8601)
        #expect(!d.logs.text.contains(token), "the token is never logged")
        #expect(!d.logs.text.contains(Self.secret))

        // ttl defaults to an hour.
        let plain = try await d.client.post("/v1/client-tokens", #"{"app":"com.example.app","user":"bob","device":"\#(Self.device)"}"#)
        #expect(plain.status == 201)
        let second = try ClientToken.verify(plain.json?["token"]?.stringValue ?? "", secret: Secret(Self.secret), app: "com.example.app", now: Date())
        #expect(second.expiresAt.timeIntervalSince(second.issuedAt) == 3600)
    }

    @Test func scopeIsEnforced() async throws {
        let d = try await TestDaemon.start(config: Self.config())
        let body = #"{"app":"com.example.app","user":"alice","device":"\#(Self.device)"}"#
        let sendOnly = try await HTTPTestClient(port: d.port, key: TestDaemon.sendOnlyKey).post("/v1/client-tokens", body)
        #expect(sendOnly.status == 403)
        #expect(sendOnly.json?["error"]?["message"]?.stringValue == "API key \"sender\" lacks the \"devices\" scope")
        let anonymous = try await HTTPTestClient(port: d.port).post("/v1/client-tokens", body)
        #expect(anonymous.status == 401)
        #expect(anonymous.json?["token"] == nil)
        #expect(try await d.client.get("/v1/client-tokens").status == 405)
    }

    @Test func badInputNamesTheField() async throws {
        let d = try await TestDaemon.start(config: Self.config())
        func field(_ body: String) async throws -> (Int, String?) {
            let r = try await d.client.post("/v1/client-tokens", body)
            return (r.status, r.errorField)
        }
        let device = Self.device
        #expect(try await field(#"{"user":"a","device":"\#(device)"}"#) == (400, "app"))
        #expect(try await field(#"{"app":"com.example.ap","user":"a","device":"\#(device)"}"#) == (400, "app"))
        #expect(try await field(#"{"app":"org.other.app","user":"a","device":"\#(device)"}"#) == (400, "app"))
        #expect(try await field(#"{"app":"com.example.app","device":"\#(device)"}"#) == (400, "user"))
        #expect(try await field(#"{"app":"com.example.app","user":"a","device":"zz"}"#) == (400, "device"))
        #expect(try await field(#"{"app":"com.example.app","user":"a","device":"\#(device)","ttl":0}"#) == (400, "ttl"))
        #expect(try await field(#"{"app":"com.example.app","user":"a","device":"\#(device)","ttl":2592001}"#) == (400, "ttl"))
        #expect(try await field(#"{"app":"com.example.app","user":"a","device":"\#(device)","ttl":"1h"}"#) == (400, "ttl"))
        #expect(try await field(#"{"app":"com.example.app","user":"a","device":"\#(device)","tll":60}"#) == (400, "tll"))
        let noSecret = try await d.client.post("/v1/client-tokens", #"{"app":"org.other.app","user":"a","device":"\#(device)"}"#)
        #expect(noSecret.json?["error"]?["message"]?.stringValue?.contains("app org.other.app has no clientSecret") == true)
        #expect(try await d.client.post("/v1/client-tokens", "[]").status == 400)
    }

    @Test func authenticatorReadsHeaderOrQueryAndNamesTheReason() throws {
        let directory = try TemporaryDirectory(prefix: "herald-client-token")
        defer { directory.remove() }
        let configuration = try TestDaemon.parse(Self.config(), directory: directory).configuration
        let clock = TestClock(start: Date(timeIntervalSince1970: 1_800_000_000))
        let auth = ClientTokenAuthenticator(configuration: configuration, clock: clock)
        let app = try #require(configuration.app("com.example.app"))
        let minted = try ClientToken.issue(app: app, user: "alice", device: Self.device, lifetime: 60, now: clock.now)

        let viaHeader = auth.authenticate(request: HTTPRequest(method: "GET", path: "/v1/stream", headers: ["authorization": "Bearer " + minted.token]),
                                          app: "com.example.app")
        #expect(try viaHeader.get() == minted.claims)
        let viaQuery = auth.authenticate(request: HTTPRequest(method: "GET", path: "/v1/stream", query: ["access_token": minted.token]),
                                         app: "com.example.app")
        #expect(try viaQuery.get() == minted.claims)

        func refusal(_ request: HTTPRequest, app: String = "com.example.app") -> APIError? {
            if case .failure(let e) = auth.authenticate(request: request, app: app) { return e }
            return nil
        }
        let missing = refusal(HTTPRequest(method: "GET", path: "/v1/stream"))
        #expect(missing?.status == 401)
        #expect(missing?.code == "invalid_client_token")
        #expect(missing?.headers["WWW-Authenticate"]?.contains("invalid_token") == true)

        let forged = ClientToken.sign(minted.claims, secret: Secret("another-secret-0123456789abcdef-0123"))
        let bad = refusal(HTTPRequest(method: "GET", path: "/", query: ["access_token": forged]))
        #expect(bad?.status == 401)
        #expect(bad?.message.hasPrefix("bad signature") == true)
        #expect(bad?.message.contains(forged) == false)

        let garbage = refusal(HTTPRequest(method: "GET", path: "/", query: ["access_token": "not-a-token"]))
        #expect(garbage?.message.hasPrefix("malformed client token") == true)

        clock.advance(by: 60)
        let expired = refusal(HTTPRequest(method: "GET", path: "/", headers: ["authorization": "bearer " + minted.token]))
        #expect(expired?.code == "invalid_client_token")
        #expect(expired?.message == "client token expired at \(minted.claims.expiresAt.iso8601); mint a new one")

        let otherApp = refusal(HTTPRequest(method: "GET", path: "/", query: ["access_token": minted.token]), app: "org.other.app")
        #expect(otherApp?.status == 400)
        #expect(otherApp?.field == "app")
        let unknown = refusal(HTTPRequest(method: "GET", path: "/", query: ["access_token": minted.token]), app: "nope")
        #expect(unknown?.status == 400)
        #expect(unknown?.field == "app")
    }

    // MARK: Issue 24, items 12 and 13

    /// A token with these times, signed with the app's real secret (as a backend with a wrong
    /// clock, or one holding the secret and minting its own, would).
    static func forged(iat: Date, exp: Date, user: String = "alice", device: String = device) -> String {
        ClientToken.sign(ClientTokenClaims(user: user, app: LocalDeliveryTests.app, device: device, issuedAt: iat, expiresAt: exp),
                         secret: Secret(LocalDeliveryTests.secret))
    }

    @Test func aStreamRefusesTokensFromTheFutureOrLivingTooLong() async throws {
        let (d, _) = try await LocalDeliveryTests.start(policy: "local-first")
        func open(_ token: String) async throws -> HTTPTestClient.Response {
            try await HTTPTestClient(port: d.port).get("/v1/stream?app=\(LocalDeliveryTests.app)&access_token=\(token)")
        }
        let now = Date()
        let future = try await open(Self.forged(iat: now.addingTimeInterval(10 * 365 * 86_400), exp: now.addingTimeInterval(10 * 365 * 86_400 + 3600)))
        #expect(future.status == 401, "\(future)")
        #expect(future.json?["error"]?["code"]?.stringValue == "invalid_client_token")
        #expect(future.json?["error"]?["message"]?.stringValue?.contains("ahead of this server's clock") == true, "\(future)")
        let forever = try await open(Self.forged(iat: now, exp: Date(timeIntervalSince1970: 253_402_300_799)))
        #expect(forever.status == 401, "\(forever)")
        #expect(forever.json?["error"]?["message"]?.stringValue?.hasPrefix("client token lifetime (exp - iat) is") == true, "\(forever)")
        // A token minted by the API itself opens the stream (the bounds refuse only what minting cannot make).
        let minted = try await d.client.post("/v1/client-tokens", #"{"app":"\#(LocalDeliveryTests.app)","user":"alice","device":"\#(Self.device)","ttl":2592000}"#)
        #expect(minted.status == 201, "\(minted)")
        let stream = try await StreamClient(port: d.port, query: "app=\(LocalDeliveryTests.app)", token: minted.json?["token"]?.stringValue ?? "")
        #expect(stream.status == 200, "\(stream.head)")
    }

    @Test func mintingForAnotherUsersDeviceIsRefusedAsTheStreamWouldRefuseIt() async throws {
        let (d, _) = try await LocalDeliveryTests.start(policy: "local-first")
        let app = LocalDeliveryTests.app
        let device = String(repeating: "ab", count: 32)
        let registered = try await d.client.post("/v1/devices", #"{"app":"\#(app)","user":"alice","token":"\#(device)"}"#)
        #expect(registered.status == 201, "\(registered)")
        let mallory = try await d.client.post("/v1/client-tokens", #"{"app":"\#(app)","user":"mallory","device":"\#(device.uppercased())"}"#)
        #expect(mallory.status == 403, "\(mallory)")
        #expect(mallory.json?["error"]?["code"]?.stringValue == "device_of_another_user")
        #expect(mallory.json?["token"] == nil)
        #expect(mallory.json?["error"]?["message"]?.stringValue?.contains("belongs to another user") == true)
        // The stream applies the same rule to a token signed elsewhere for mallory.
        let stream = try await HTTPTestClient(port: d.port)
            .get("/v1/stream?app=\(app)&access_token=\(Self.forged(iat: Date(), exp: Date().addingTimeInterval(600), user: "mallory", device: device))")
        #expect(stream.status == 401)
        #expect(stream.json?["error"]?["message"]?.stringValue?.contains("belongs to another user") == true)
        // The device's own user, and a device the store does not know (a browser's installation id), are minted.
        #expect(try await d.client.post("/v1/client-tokens", #"{"app":"\#(app)","user":"alice","device":"\#(device)"}"#).status == 201)
        #expect(try await d.client.post("/v1/client-tokens", #"{"app":"\#(app)","user":"mallory","device":"\#(Self.device)"}"#).status == 201)
    }
}
