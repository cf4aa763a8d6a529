import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// The built `herald serve` killed with SIGKILL while the user's inbox holds notifications, then
/// started again on the same database: what was parked for a closed app arrives once when the
/// app opens its stream, and what was written live is replayed from the inbox with
/// `Last-Event-ID`, once and in order.
@Suite(.serialized) struct LocalDurabilityTests {
    static let key = "local-durability-key-0123456789"
    static let secret = "local-durability-secret-0123456789abcdef"
    static let app = "com.example.app"
    static let device = TestDaemon.token(1)
    static let parkedCount = 5, liveCount = 4

    /// `local-only` app with a `log` push route. The heartbeat (60 s) is longer than the test
    /// client's receive timeout (20 s), so a read that waits for an event that never comes fails
    /// instead of being kept alive by heartbeats.
    static func config() -> String {
        """
        {
          "storage": {"path": "herald.db"},
          "apps": {"\(app)": {"routes": ["push", "live"], "foreground": "local-only", "clientSecret": "${CLIENT_SECRET}",
                              "inbox": {"ttl": 3600, "maxPerUser": 1000}}},
          "transports": {"push": {"type": "log", "path": "deliveries.jsonl"}, "live": {"type": "local"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}],
                  "streams": {"heartbeat": "60s"}},
          "server": {"batchLinger": 0},
          "log": {"level": "info"}
        }
        """
    }

    static var environment: [String: String] { ["HERALD_API_KEY": key, "CLIENT_SECRET": secret] }

    static func start(_ dir: TemporaryDirectory) async throws -> (ChildProcess, HTTPTestClient) {
        let child = try ChildProcess.herald(["serve", "--config", dir.file("config.json")], environment: environment, directory: dir.path)
        guard let port = await child.listeningPort(timeout: 60) else {
            child.terminate()
            throw HTTPTestClient.Failure(description: "herald serve did not start: \(child.stderr)")
        }
        return (child, HTTPTestClient(port: port, key: key))
    }

    /// SIGKILL (the test runner's pool threads block the other signals, and a child inherits
    /// that mask; SIGKILL cannot be blocked), and waits for the exit.
    static func kill9(_ child: ChildProcess) async {
        child.signal(SIGKILL)
        #expect(await child.waitForExit(timeout: 20) != nil, "herald serve (pid \(child.pid)) still runs after SIGKILL")
    }

    static func send(_ client: HTTPTestClient, _ text: String) async throws -> String {
        let r = try await client.post("/v1/notifications", #"{"app":"\#(app)","users":["alice"],"alert":"\#(text)"}"#)
        #expect(r.status == 202, "\(r)")
        return try #require(r.json?["id"]?.stringValue)
    }

    /// The notification's deliveries as "transport state".
    static func routes(_ client: HTTPTestClient, _ id: String) async throws -> [String] {
        let status = try await client.get("/v1/notifications/\(id)")
        return (status.json?["deliveries"]?.arrayValue ?? []).map {
            "\($0["transport"]?.stringValue ?? "-") \($0["state"]?.stringValue ?? "-")"
        }.sorted()
    }

    /// Waits (up to 20 s) until each of `ids` has the one delivery `live <state>`.
    static func waitFor(_ state: String, _ client: HTTPTestClient, _ ids: [String]) async -> Bool {
        await eventually(timeout: 20) {
            for id in ids where (try? await routes(client, id)) != ["live \(state)"] { return false }
            return true
        }
    }

    /// Sends a marker and reads up to it: the marker must be the very next event, so nothing
    /// before it came twice.
    static func expectNothingMoreThenMarker(_ stream: StreamClient, _ client: HTTPTestClient, _ label: String,
                                            expectedID: Int64) async throws {
        let marker = try await send(client, label)
        #expect(await waitFor("delivered", client, [marker]), "the marker \(label) was not written to the stream")
        let next = try #require(try await stream.next(), "the stream ended before the marker \(label)")
        #expect(next.json?["id"]?.stringValue == marker, "an event came before the marker \(label): \(next.data)")
        #expect(next.id == expectedID)
    }

    @Test(.timeLimit(.minutes(2))) func inboxesSurviveKill9ParkedArriveOnceAndLiveEventsReplayOnceInOrder() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary), "build herald first: swift build")
        let dir = try TemporaryDirectory(prefix: "herald-local-kill9")
        defer { dir.remove() }
        try dir.write("config.json", Self.config())
        // The client token as an app backend would mint it.
        let minted = try await Run.herald(["client-token", "--config", dir.file("config.json"), "--app", Self.app, "--user", "alice",
                                     "--device", Self.device, "--ttl", "1h"], environment: Self.environment, directory: dir.path)
        #expect(minted.status == 0, "\(minted.stderr)")
        let token = try #require(minted.lines.first)

        // 1. No stream open: every notification parks for the local route.
        var (child, client) = try await Self.start(dir)
        defer { child.terminate() }
        #expect(try await client.post("/v1/devices", #"{"app":"\#(Self.app)","user":"alice","token":"\#(Self.device)"}"#).status == 201)
        var parked: [String] = []
        for i in 1...Self.parkedCount { parked.append(try await Self.send(client, "parked \(i)")) }
        #expect(await Self.waitFor("parked", client, parked), "not parked: \(child.stderr)")

        await Self.kill9(child)
        (child, client) = try await Self.start(dir)

        // The app opens its stream (no Last-Event-ID): the parked ones are written to it.
        var stream = try await StreamClient(port: client.port, query: "app=\(Self.app)", token: token)
        #expect(stream.status == 200, "\(stream.head)")
        #expect(await Self.waitFor("delivered", client, parked), "parked deliveries not delivered after the restart: \(child.stderr)")
        let arrived = try await stream.events(Self.parkedCount)
        #expect(arrived.compactMap { $0.json?["id"]?.stringValue }.sorted() == parked.sorted())
        #expect(arrived.map(\.id) == (1...Self.parkedCount).map { Int64($0) })
        try await Self.expectNothingMoreThenMarker(stream, client, "after the parked", expectedID: Int64(Self.parkedCount + 1))

        // 2. With the stream open, more are written live.
        var live: [String] = []
        for i in 1...Self.liveCount { live.append(try await Self.send(client, "live \(i)")) }
        // Their outcomes are committed before the kill (a kill between the write to the stream
        // and that commit is another window, where the delivery is attempted again).
        #expect(await Self.waitFor("delivered", client, live))
        let written = try await stream.events(Self.liveCount)
        #expect(written.compactMap { $0.json?["id"]?.stringValue } == live, "live events out of order")
        let firstLive = Int64(Self.parkedCount + 2)
        #expect(written.map(\.id) == (0..<Int64(Self.liveCount)).map { firstLive + $0 })

        await Self.kill9(child)
        (child, client) = try await Self.start(dir)

        // The client read them all but asks again from just before the first: the inbox has them.
        stream = try await StreamClient(port: client.port, query: "app=\(Self.app)", token: token, lastEventID: firstLive - 1)
        #expect(stream.status == 200, "\(stream.head)")
        let replayed = try await stream.events(Self.liveCount)
        #expect(replayed.map(\.id) == written.map(\.id))
        #expect(replayed.compactMap { $0.json?["id"]?.stringValue } == live)
        #expect(replayed.map(\.data) == written.map(\.data), "the replayed events differ from the ones written live")
        try await Self.expectNothingMoreThenMarker(stream, client, "after the replay", expectedID: firstLive + Int64(Self.liveCount))
        for id in parked + live { #expect(try await Self.routes(client, id) == ["live delivered"]) }
        // The push route was never used.
        let pushed = (try? String(contentsOfFile: dir.file("deliveries.jsonl"), encoding: .utf8)) ?? ""
        #expect(pushed.isEmpty, "the push route was used: \(pushed)")

        child.signal(SIGKILL)
        _ = await child.waitForExit(timeout: 20)
    }
}
