import Foundation
import HeraldCore
import HeraldSQLite
import HeraldTestKit
import Testing

/// What an upgrade fixture holds (`Tests/Fixtures/upgrade/<commit>/<driver>/manifest.json`, written by
/// `scripts/make-upgrade-fixtures.sh COMMIT` from the API and the rows of the database it made).
struct UpgradeManifest: Decodable {
    struct Device: Decodable {
        var app: String
        var user: String
        var token: String
        var transport: String
        var environment: String
        /// Apple's 410 timestamp (ms since 1970) the device was invalidated at, if it was.
        var invalidatedAtMs: Int64?
        var invalidationReason: String?
    }

    struct Expected: Decodable {
        /// The delivery's state once the new version has run.
        var state: String
        /// Sent to APNs (exactly once) by the new version.
        var sentToApns: Bool
        /// Written to its device's stream when the stream opens (a parked delivery).
        var stream: Bool?
    }

    struct Delivery: Decodable {
        var token: String
        var user: String?
        var transport: String
        var apnsId: String
        /// The state in the fixture (`parked` for a parked delivery, as the API shows it).
        var state: String
        var attempts: Int
        var expected: Expected
    }

    struct Notification: Decodable {
        var id: String
        var app: String
        var scenario: String
        var idempotencyKey: String?
        var deliveries: [Delivery]
    }

    struct Idempotency: Decodable {
        var app: String
        var key: String
        var notification: String
    }

    struct InboxEntry: Decodable {
        var app: String
        var user: String
        var seq: Int64
        var device: String
        var notification: String
    }

    struct InboxSequence: Decodable {
        var app: String
        var user: String
        var seq: Int64
    }

    var heraldCommit: String
    var driver: String
    var schemaVersion: Int
    var database: String
    var config: String
    /// When the last retry the old version scheduled is due (ms since 1970).
    var retryDueAtMs: Int64
    var devices: [Device]
    var notifications: [Notification]
    var idempotency: [Idempotency]
    var inbox: [InboxEntry]
    var inboxSequences: [InboxSequence]

    static func load(_ path: String) throws -> UpgradeManifest {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try decoder.decode(UpgradeManifest.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }
}

/// A database written by an earlier Herald (`Tests/Fixtures/upgrade/`, made with
/// `scripts/make-upgrade-fixtures.sh` from the real `herald serve` of the commit in its manifest)
/// opened by the built `herald serve` on the fixture's own `config.json`, with its transports now
/// working (an APNs simulator answering 200): it migrates in place and keeps everything. Every
/// delivery left queued behind a paused transport or retrying reaches APNs exactly once with its
/// stored apns-id, parked local deliveries come out when their device opens its stream, the inbox
/// replays with the old sequence numbers, the idempotency key answers the original notification,
/// and the devices keep their environment and Apple's invalidation time.
@Suite(.serialized) struct UpgradeTests {
    static let key = "upgrade-test-key-0123456789abcdef"
    static let liveSecret = "upgrade-test-live-secret-0123456789abcdef"

    /// The commits whose Herald wrote a fixture set: the first schema with fixtures, and the last
    /// `main` before this version (each driver's schema steps since then run on its data).
    static let commits = ["cefef4f", "7ddb8bc", "16a23cb"]

    static func fixture(_ commit: String, _ driver: String) -> String { "\(PackagePaths.root)/Tests/Fixtures/upgrade/\(commit)/\(driver)" }

    @Test(.timeLimit(.minutes(2)), arguments: commits) func sqliteFixtureOpensMigratesAndKeepsEverything(commit: String) async throws {
        try await upgrade(commit: commit, driver: "sqlite")
    }

    @Test(.timeLimit(.minutes(2)), arguments: commits) func postgresqlFixtureOpensMigratesAndKeepsEverything(commit: String) async throws {
        try await upgrade(commit: commit, driver: "postgresql")
    }

    /// The fixture's config.json with one change: a stream heartbeat (60 s) longer than the test
    /// client's receive timeout (20 s), so a read waiting for an event that never comes fails
    /// instead of being kept alive by heartbeats (the fixture was made with 1 s, so that the old
    /// daemon saw erin's stream close at once).
    static func config(_ fixture: String, _ name: String) throws -> Data {
        let data = try Data(contentsOf: URL(fileURLWithPath: "\(fixture)/\(name)"))
        guard var root = try JSONSerialization.jsonObject(with: data) as? [String: Any],
              var api = root["api"] as? [String: Any] else { throw TestSetupError("\(fixture)/\(name): no api section") }
        var streams = api["streams"] as? [String: Any] ?? [:]
        streams["heartbeat"] = "60s"
        api["streams"] = streams
        root["api"] = api
        return try JSONSerialization.data(withJSONObject: root, options: [.prettyPrinted, .sortedKeys])
    }

    func upgrade(commit: String, driver: String) async throws {
        #expect(FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary), "build herald first: swift build")
        let fixture = Self.fixture(commit, driver)
        let manifest = try UpgradeManifest.load("\(fixture)/manifest.json")
        #expect(manifest.driver == driver)
        #expect(manifest.heraldCommit.hasPrefix(commit))
        let dir = try TemporaryDirectory(prefix: "herald-upgrade-\(driver)")
        defer { dir.remove() }

        // The folder the old daemon ran in: config.json, certs/ (relative paths), the database.
        let certs = try TestCertificates.shared()
        try FileManager.default.createDirectory(atPath: dir.file("certs"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: certs.caFile, toPath: dir.file("certs/ca.pem"))
        try FileManager.default.copyItem(atPath: certs.authKey, toPath: dir.file("certs/AuthKey_ABC123DEFG.p8"))
        try Self.config(fixture, manifest.config).write(to: URL(fileURLWithPath: dir.file("config.json")))

        let apns = try HTTP2SimulatorHarness.tokenAuth()
        defer { apns.stop() }
        var environment = ["HERALD_API_KEY": Self.key, "LIVE_CLIENT_SECRET": Self.liveSecret,
                           "APNS_PROD_ENDPOINT": apns.baseURL, "APNS_SANDBOX_ENDPOINT": apns.baseURL]
        var postgres: (server: PostgresServer, database: String)?
        if driver == "sqlite" {
            try FileManager.default.copyItem(atPath: "\(fixture)/\(manifest.database)", toPath: dir.file("herald.db"))
        } else {
            let server = try await PostgresServer.shared()
            let url = try await server.createDatabase()
            let database = String(url.split(separator: "/").last!)
            try server.restore(dump: "\(fixture)/\(manifest.database)", into: database)
            environment["HERALD_PG_URL"] = url
            postgres = (server, database)
        }

        // A fixture made moments ago: its retries are not due yet (a committed one's long are).
        let due = Date(timeIntervalSince1970: Double(manifest.retryDueAtMs) / 1000)
        if due > Date() { try await Task.sleep(nanoseconds: UInt64(due.timeIntervalSinceNow * 1e9) + 100_000_000) }

        let child = try ChildProcess.herald(["serve", "--config", dir.file("config.json")], environment: environment, directory: dir.path)
        defer { child.terminate() }
        guard let port = await child.listeningPort(timeout: 60) else {
            Issue.record("herald serve did not start on the \(driver) fixture: \(child.stderr)")
            return
        }
        let client = HTTPTestClient(port: port, key: Self.key)

        try await expectPushDeliveredOnce(manifest, client, apns, child)
        try await expectParkedComeOutAndInboxReplays(manifest, client, child)
        try await expectIdempotencyKeysAnswerTheOriginal(manifest, client, apns)
        try await expectDevicesKept(manifest, client)
        for n in manifest.notifications { try await expectFinalStates(n, client) }
        let ready = try await client.get("/readyz")
        #expect(ready.json?["status"]?.stringValue == "ready", "\(ready)")

        if let postgres {
            let version = Int(try await postgres.server.query(postgres.database, "SELECT max(version) FROM herald_schema")
                .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
            #expect(version >= manifest.schemaVersion, "the schema went back from \(manifest.schemaVersion) to \(version)")
        }
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 20) == 0, "herald serve did not exit 0 on SIGTERM: \(child.stderr.suffix(2000))")
        if driver == "sqlite" {
            let version = try SQLiteDatabase(path: dir.file("herald.db")).userVersion()
            #expect(version >= manifest.schemaVersion, "the schema went back from \(manifest.schemaVersion) to \(version)")
        }
    }

    /// Every delivery queued behind the paused transport or retrying reaches APNs once, with its
    /// stored apns-id and token; nothing else is sent (the invalidated device, the live ones).
    func expectPushDeliveredOnce(_ manifest: UpgradeManifest, _ client: HTTPTestClient, _ apns: HTTP2SimulatorHarness,
                                 _ child: ChildProcess) async throws {
        let expected = manifest.notifications.flatMap { n in n.deliveries.filter(\.expected.sentToApns).map { (n, $0) } }
        #expect(!expected.isEmpty, "the fixture holds no delivery for APNs")
        let arrived = await eventually(timeout: 20) { apns.simulator.received.count >= expected.count }
        #expect(arrived, "APNs got \(apns.simulator.received.count) of \(expected.count): \(child.stderr.suffix(3000))")
        for n in Set(expected.map { $0.0.id }) {
            let final = await eventually(timeout: 20) {
                let deliveries = (try? await client.get("/v1/notifications/\(n)"))?.json?["deliveries"]?.arrayValue ?? []
                return !deliveries.isEmpty && deliveries.allSatisfy { !["queued", "sent"].contains($0["state"]?.stringValue ?? "") }
            }
            #expect(final, "notification \(n) has deliveries not final")
        }
        try await Task.sleep(nanoseconds: 300_000_000)   // a second send would have come by now
        var sent: [String: [String]] = [:]   // apns-id → tokens
        for r in apns.simulator.received { sent[r.apnsID.lowercased(), default: []].append(r.deviceToken.lowercased()) }
        for (n, d) in expected {
            #expect(sent[d.apnsId.lowercased()] == [d.token], "\(n.id) to \(d.token) (\(n.scenario)): sent \(sent[d.apnsId.lowercased()] ?? [])")
        }
        let unexpected = Set(sent.keys).subtracting(expected.map { $0.1.apnsId.lowercased() })
        #expect(unexpected.isEmpty, "APNs got deliveries the fixture does not hold: \(unexpected.map { "\($0) → \(sent[$0]!)" })")
        #expect(apns.simulator.received.count == expected.count)
    }

    /// The devices with parked deliveries open their streams (with `Last-Event-ID: 0` when the
    /// inbox holds events of theirs): the old events come back with their old ids, then the
    /// parked ones, numbered after the user's last sequence number.
    func expectParkedComeOutAndInboxReplays(_ manifest: UpgradeManifest, _ client: HTTPTestClient, _ child: ChildProcess) async throws {
        struct Device: Hashable { var app: String, user: String, token: String }
        var parked: [Device: [String]] = [:]
        for n in manifest.notifications {
            for d in n.deliveries where d.expected.stream == true {
                parked[Device(app: n.app, user: d.user ?? "", token: d.token), default: []].append(n.id)
            }
        }
        #expect(!parked.isEmpty, "the fixture holds no parked delivery")
        #expect(!manifest.inbox.isEmpty, "the fixture holds no inbox entry")
        let devices = Set(parked.keys).union(manifest.inbox.map { Device(app: $0.app, user: $0.user, token: $0.device) })
        for device in devices.sorted(by: { ($0.app, $0.user, $0.token) < ($1.app, $1.user, $1.token) }) {
            let old = manifest.inbox.filter { $0.app == device.app && $0.user == device.user && $0.device == device.token }
                .sorted { $0.seq < $1.seq }
            let waiting = parked[device] ?? []
            let last = manifest.inboxSequences.first { $0.app == device.app && $0.user == device.user }?.seq ?? 0
            let minted = try await client.post("/v1/client-tokens",
                                               #"{"app":"\#(device.app)","user":"\#(device.user)","device":"\#(device.token)","ttl":3600}"#)
            let token = try #require(minted.json?["token"]?.stringValue, "\(minted)")
            let stream = try await StreamClient(port: client.port, query: "app=\(device.app)", token: token,
                                                lastEventID: old.isEmpty ? nil : 0)
            #expect(stream.status == 200, "\(stream.head)")
            // Parked deliveries are written after the replay: once they are delivered, every
            // event is in the socket, and a read for one that never came fails after 20 s.
            let delivered = await eventually(timeout: 15) {
                for id in waiting where await Self.state(client, id, device.token) != "delivered" { return false }
                return true
            }
            #expect(delivered, "\(device.user)'s parked deliveries did not come out: \(child.stderr.suffix(2000))")
            let events: [SSEEvent]
            do {
                events = try await stream.events(old.count + waiting.count)
            } catch {
                Issue.record("\(device.user): fewer than \(old.count) replayed + \(waiting.count) parked events on the stream: \(error)")
                continue
            }
            let replayed = Array(events.prefix(old.count)), fresh = Array(events.dropFirst(old.count))
            #expect(replayed.map(\.id) == old.map { Optional($0.seq) }, "\(device.user): replayed ids")
            #expect(replayed.map { $0.json?["id"]?.stringValue } == old.map(\.notification), "\(device.user): replayed notifications")
            #expect(replayed.allSatisfy { $0.event == "notification" && $0.json?["app"]?.stringValue == device.app })
            #expect(fresh.map(\.id) == (0..<Int64(waiting.count)).map { Optional(last + 1 + $0) }, "\(device.user): parked events' ids")
            #expect(Set(fresh.compactMap { $0.json?["id"]?.stringValue }) == Set(waiting), "\(device.user): parked notifications")
            #expect(fresh.count == waiting.count)
        }
    }

    /// Each idempotency key answers its original notification's receipt, and sends nothing.
    func expectIdempotencyKeysAnswerTheOriginal(_ manifest: UpgradeManifest, _ client: HTTPTestClient,
                                                _ apns: HTTP2SimulatorHarness) async throws {
        #expect(!manifest.idempotency.isEmpty, "the fixture holds no idempotency key")
        let before = apns.simulator.received.count
        for entry in manifest.idempotency {
            let original = try #require(manifest.notifications.first { $0.id == entry.notification })
            let users = Array(Set(original.deliveries.compactMap(\.user))).sorted().map { "\"\($0)\"" }.joined(separator: ",")
            let r = try await client.post("/v1/notifications",
                                          #"{"app":"\#(entry.app)","users":[\#(users)],"alert":"again","idempotency_key":"\#(entry.key)"}"#)
            #expect(r.status == 202, "\(r)")
            #expect(r.json?["id"]?.stringValue == entry.notification, "the key \(entry.key) answered \(r.text)")
            #expect(r.json?["deliveries"]?.intValue == original.deliveries.count)
            #expect(r.headers["idempotent-replayed"] == "true")
        }
        try await Task.sleep(nanoseconds: 300_000_000)
        #expect(apns.simulator.received.count == before, "a replayed idempotency key sent notifications")
    }

    /// `GET /v1/users/{user}/devices?app=` lists every device with its transport, environment and
    /// Apple's invalidation time.
    func expectDevicesKept(_ manifest: UpgradeManifest, _ client: HTTPTestClient) async throws {
        #expect(Set(manifest.devices.map(\.environment)) == ["production", "sandbox"])
        #expect(manifest.devices.contains { $0.invalidatedAtMs != nil })
        let users = Set(manifest.devices.map { "\($0.app) \($0.user)" }).sorted()
        for entry in users {
            let parts = entry.split(separator: " ").map(String.init)
            let r = try await client.get("/v1/users/\(parts[1])/devices?app=\(parts[0])")
            #expect(r.status == 200, "\(r)")
            let listed = r.json?["devices"]?.arrayValue ?? []
            let expected = manifest.devices.filter { $0.app == parts[0] && $0.user == parts[1] }
            #expect(Set(listed.compactMap { $0["token"]?.stringValue }) == Set(expected.map(\.token)), "\(entry): \(r.text)")
            for d in expected {
                let shown = try #require(listed.first { $0["token"]?.stringValue == d.token }, "\(entry): \(d.token) not listed")
                #expect(shown["app"]?.stringValue == d.app && shown["user"]?.stringValue == d.user)
                #expect(shown["transport"]?.stringValue == d.transport, "\(d.token)")
                #expect(shown["environment"]?.stringValue == d.environment, "\(d.token)")
                #expect(shown["invalidation_reason"]?.stringValue == d.invalidationReason, "\(d.token)")
                let shownTime = shown["invalidated_at"]?.stringValue.flatMap(Self.milliseconds)
                #expect(shownTime == d.invalidatedAtMs, "\(d.token): invalidated_at \(shown["invalidated_at"]?.stringValue ?? "null")")
            }
        }
    }

    /// `GET /v1/notifications/{id}` reports each delivery in its expected end state.
    func expectFinalStates(_ n: UpgradeManifest.Notification, _ client: HTTPTestClient) async throws {
        let r = try await client.get("/v1/notifications/\(n.id)")
        #expect(r.status == 200, "\(n.id): \(r)")
        #expect(r.json?["app"]?.stringValue == n.app)
        #expect(r.json?["idempotency_key"]?.stringValue == n.idempotencyKey)
        let shown = r.json?["deliveries"]?.arrayValue ?? []
        #expect(shown.count == n.deliveries.count, "\(n.id): \(r.text)")
        for d in n.deliveries {
            let s = shown.first { $0["token"]?.stringValue == d.token }
            #expect(s?["state"]?.stringValue == d.expected.state, "\(n.id) to \(d.token) (\(n.scenario)): \(s.map { "\($0)" } ?? "missing")")
            #expect(s?["transport"]?.stringValue == d.transport)
            // The old apns_id is the delivery's neutral message id now; APNs routes still show it as apns_id.
            #expect(s?["message_id"]?.stringValue?.lowercased() == d.apnsId.lowercased())
            if d.transport != "live" { #expect(s?["apns_id"]?.stringValue?.lowercased() == d.apnsId.lowercased()) } else { #expect(s?["apns_id"] == nil) }
            // The attempts of the old version are kept: one more for what was sent since.
            let sentSince = d.expected.sentToApns || d.expected.stream == true
            #expect(s?["attempts"]?.intValue == d.attempts + (sentSince ? 1 : 0), "\(n.id) to \(d.token): attempts \(s.map { "\($0)" } ?? "")")
            // The old version kept no attempt history: empty for its attempts, one entry for the attempt made since.
            let history = s?["history"]?.arrayValue
            #expect(history?.count == (sentSince ? 1 : 0), "\(n.id) to \(d.token): history \(s.map { "\($0)" } ?? "")")
            if sentSince {
                #expect(history?.first?["route"]?.stringValue == d.transport && history?.first?["next"]?.stringValue == "delivered",
                        "\(n.id) to \(d.token): \(String(describing: history))")
            }
        }
    }

    static func state(_ client: HTTPTestClient, _ id: String, _ token: String) async -> String? {
        let r = try? await client.get("/v1/notifications/\(id)")
        return (r?.json?["deliveries"]?.arrayValue ?? []).first { $0["token"]?.stringValue == token }?["state"]?.stringValue
    }

    /// `2026-12-01T22:12:41.787Z` → milliseconds since 1970.
    static func milliseconds(_ iso: String) -> Int64? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = formatter.date(from: iso) ?? ISO8601DateFormatter().date(from: iso) else { return nil }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }
}
