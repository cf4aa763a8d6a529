import Foundation
import HeraldAPNsHTTP2
import HeraldCore
import HeraldSQLite
import HeraldSimulator
import HeraldTestKit
import Testing

/// `POST/GET/DELETE /v1/channels` through a daemon whose app has an `apns-http2` route, against
/// the APNs simulator's management port (real TLS, a provider token).
@Suite(.serialized, .stopsDaemons) struct ChannelAPITests {
    static let app = "com.example.app"

    static func start(channelLimit: Int = 10_000) async throws -> (HTTP2SimulatorHarness, TestDaemon) {
        let apns = try HTTP2SimulatorHarness.tokenAuth { c in
            c.managementPort = 0
            c.channelLimit = channelLimit
        }
        let certs = apns.certificates
        var registry = TransportRegistry()
        registry.register(APNsHTTP2Transport.self)
        let config = """
            {
              "storage": {"path": "herald.db", "synchronous": "normal"},
              "apps": {"\(app)": {"routes": ["apns"]}, "org.other.app": {"routes": ["apns"]}},
              "transports": {
                "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\(apns.baseURL)", "caFile": "\(certs.caFile)",
                         "managementEndpoint": "https://127.0.0.1:\(apns.simulator.managementPort)",
                         "keyFile": "\(certs.authKey)", "keyId": "\(certs.authKeyID)", "teamId": "\(certs.teamID)"}},
              "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\(TestDaemon.key)", "scopes": ["admin"]}]},
              "server": {"batchLinger": 0, "maintenanceInterval": "1h"},
              "log": {"level": "debug"}
            }
            """
        do {
            let test = try await TestDaemon.start(plugins: config, registry: registry, prefix: "herald-channels")
            return (apns, test)
        } catch {
            apns.stop()
            throw error
        }
    }

    static func escaped(_ id: String) -> String {
        id.addingPercentEncoding(withAllowedCharacters: CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"))!
    }

    @Test(.timeLimit(.minutes(2))) func aChannelIsCreatedListedBesideApplesAndDeleted() async throws {
        let (apns, test) = try await Self.start()
        defer { apns.stop() }
        let client = test.client
        var r = try await client.post("/v1/channels", #"{"app": "\#(Self.app)", "storage_policy": "most_recent"}"#)
        #expect(r.status == 201, "\(r.text)")
        let id = try #require(r.json?["id"]?.stringValue)
        #expect(r.json?["route"]?.stringValue == "apns" && r.json?["storage_policy"]?.stringValue == "most_recent")
        // Apple holds it with policy 1 (most recent message stored).
        #expect(apns.simulator.channels.channel(bundle: Self.app, id: id)?.storagePolicy == 1)
        r = try await client.post("/v1/channels", #"{"app": "\#(Self.app)"}"#)
        #expect(r.status == 201, "\(r.text)")
        let second = try #require(r.json?["id"]?.stringValue)
        #expect(apns.simulator.channels.channel(bundle: Self.app, id: second)?.storagePolicy == 0)

        // Herald's list beside Apple's: both on record and on the platform.
        r = try await client.get("/v1/channels?app=\(Self.app)")
        #expect(r.status == 200, "\(r.text)")
        #expect(r.json?["channels"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == [id, second])
        #expect(r.json?["channels"]?.arrayValue?.allSatisfy { $0["on_platform"]?.boolValue == true } == true, "\(r.text)")
        #expect(r.json?["platform"]?.arrayValue?.first?["route"]?.stringValue == "apns")
        #expect(Set(r.json?["platform"]?.arrayValue?.first?["channels"]?.arrayValue?.compactMap(\.stringValue) ?? []) == [id, second])
        #expect(r.json?["platform"]?.arrayValue?.first?["not_in_herald"]?.arrayValue == [])

        // Herald loses its record of the second (another process on the same database): the
        // list shows it as Apple's only, and a DELETE with ?app= deletes it at Apple.
        let store = try SQLiteTokenStore(path: test.database, synchronous: .normal)
        #expect(try await store.removeChannel(app: Self.app, id: second))
        r = try await client.get("/v1/channels?app=\(Self.app)")
        #expect(r.json?["platform"]?.arrayValue?.first?["not_in_herald"]?.arrayValue?.compactMap(\.stringValue) == [second], "\(r.text)")
        r = try await client.delete("/v1/channels/\(Self.escaped(second))")
        #expect(r.status == 404, "without ?app= only channels on record are found: \(r.text)")
        r = try await client.delete("/v1/channels/\(Self.escaped(second))?app=\(Self.app)")
        #expect(r.status == 204, "\(r.text)")
        #expect(apns.simulator.channels.channelIDs(bundle: Self.app) == [id])

        // Deleted at Apple and from the record.
        r = try await client.delete("/v1/channels/\(Self.escaped(id))")
        #expect(r.status == 204, "\(r.text)")
        #expect(apns.simulator.channels.channelIDs(bundle: Self.app).isEmpty)
        r = try await client.get("/v1/channels?app=\(Self.app)")
        #expect(r.json?["channels"]?.arrayValue == [], "\(r.text)")
        // Apple no longer holds it: a 404 naming Apple's reason.
        r = try await client.delete("/v1/channels/\(Self.escaped(id))?app=\(Self.app)")
        #expect(r.status == 404 && r.text.contains("ChannelNotRegistered"), "\(r.text)")

        // Bad input names its field.
        r = try await client.post("/v1/channels", #"{"app": "\#(Self.app)", "storage_policy": "all"}"#)
        #expect(r.status == 400 && r.errorField == "storage_policy", "\(r.text)")
        r = try await client.post("/v1/channels", #"{"app": "nope"}"#)
        #expect(r.status == 400 && r.errorField == "app", "\(r.text)")
        r = try await client.get("/v1/channels")
        #expect(r.status == 400 && r.errorField == "app", "\(r.text)")
        r = try await client.delete("/v1/channels")
        #expect(r.status == 405 && r.headers["allow"] == "GET, POST", "\(r.text)")
        await test.stop()
    }

    /// With 10,000 channels on record for the app, the 10,001st is a 409 naming the limit, and
    /// Apple is not asked (it would have made one: it holds none).
    @Test(.timeLimit(.minutes(3))) func theTenThousandAndFirstChannelIsA409BeforeAppleIsAsked() async throws {
        let (apns, test) = try await Self.start()
        defer { apns.stop() }
        let store = try SQLiteTokenStore(path: test.database, synchronous: .normal)
        let t0 = Date()
        for i in 0..<10_000 {
            try await store.insertChannel(StoredChannel(app: Self.app, id: "c\(i)", route: "apns", storagePolicy: .none, createdAt: t0))
        }
        var r = try await test.client.post("/v1/channels", #"{"app": "\#(Self.app)"}"#)
        #expect(r.status == 409, "\(r.text)")
        #expect(r.json?["error"]?["code"]?.stringValue == "channel_limit")
        #expect(r.text.contains("10000 channels per app and environment"), "\(r.text)")
        #expect(apns.simulator.channels.channelIDs(bundle: Self.app).isEmpty)
        // Another app's limit is its own.
        r = try await test.client.post("/v1/channels", #"{"app": "org.other.app"}"#)
        #expect(r.status == 201, "\(r.text)")
        // Deleting one makes room again.
        #expect(try await store.removeChannel(app: Self.app, id: "c0"))
        r = try await test.client.post("/v1/channels", #"{"app": "\#(Self.app)"}"#)
        #expect(r.status == 201, "\(r.text)")
        await test.stop()
    }

    /// Apple's own limit (its `CannotCreateChannelConfig`) is a 409 too.
    @Test(.timeLimit(.minutes(2))) func applesLimitIsA409() async throws {
        let (apns, test) = try await Self.start(channelLimit: 1)
        defer { apns.stop() }
        var r = try await test.client.post("/v1/channels", #"{"app": "\#(Self.app)"}"#)
        #expect(r.status == 201, "\(r.text)")
        r = try await test.client.post("/v1/channels", #"{"app": "\#(Self.app)"}"#)
        #expect(r.status == 409 && r.text.contains("CannotCreateChannelConfig"), "\(r.text)")
        await test.stop()
    }
}
