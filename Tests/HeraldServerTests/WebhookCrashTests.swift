import Foundation
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The built `herald serve` killed with SIGKILL while webhook events are pending (the receiver
/// took the first batch, then answers 503): after the restart every event arrives, and the only
/// ids sent again are those no 2xx acknowledged.
@Suite(.serialized) struct WebhookCrashTests {
    static let key = "webhook-crash-key-0123456789"
    static let secret = Secret("whsec_crash_test")
    static let devices = 7, batch = 3

    @Test(.timeLimit(.minutes(3))) func killDashNineWhilePendingLosesNothingAndRepeatsOnlyWhatWasNotAcknowledged() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary), "build herald first: swift build")
        let dir = try TemporaryDirectory(prefix: "herald-webhook-kill9")
        defer { dir.remove() }
        let open = Locked(false)
        let accepted = Locked<[Int]>([])
        // The first POST is acknowledged; then 503 until the receiver "comes back".
        let receiver = try WebhookReceiver(secrets: [Self.secret]) { n in
            guard n == 0 || open.withLock({ $0 }) else { return HTTPResponse(status: 503) }
            accepted.withLock { $0.append(n) }
            return HTTPResponse(status: 200)
        }
        let path = try dir.write("config.json", """
            {
              "storage": {"path": "herald.db", "synchronous": "full"},
              "apps": {"com.example.app": {"routes": ["dry"]}},
              "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
              "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin", "send", "devices"]}]},
              "server": {"batchLinger": 0},
              "webhooks": [{"id": "backend", "url": "http://127.0.0.1:\(receiver.port)/hook", "secret": "${HOOK_SECRET}",
                            "events": ["delivery"], "batch": \(Self.batch), "timeout": "5s"}],
              "log": {"level": "info", "format": "json"}
            }
            """)
        let environment = ["HERALD_API_KEY": Self.key, "HOOK_SECRET": Self.secret.value]
        func start() async throws -> (ChildProcess, HTTPTestClient) {
            let child = try ChildProcess.herald(["serve", "--config", path], environment: environment, directory: dir.path)
            guard let port = await child.listeningPort(timeout: 60) else {
                child.terminate()
                throw HTTPTestClient.Failure(description: "herald serve did not start: \(child.stderr)")
            }
            return (child, HTTPTestClient(port: port, key: Self.key))
        }

        let (first, client) = try await start()
        defer { first.terminate() }
        for k in 1...Self.devices {
            let r = try await client.post("/v1/devices", #"{"app":"com.example.app","user":"u","token":"\#(TestDaemon.token(k))"}"#)
            #expect(r.status == 201)
        }
        #expect(try await client.post("/v1/notifications", #"{"app":"com.example.app","users":["u"],"alert":"hi"}"#).status == 202)
        // The first batch taken, the second refused twice (its retries wait behind it, in order).
        #expect(await eventually(timeout: 60) { receiver.posts.count >= 3 }, "the receiver saw \(receiver.posts.count) POSTs: \(first.stderr)")
        first.signal(SIGKILL)
        #expect(await first.waitForExit(timeout: 30) != nil)
        open.withLock { $0 = true }

        let restarted = Date()
        let (second, client2) = try await start()
        defer { second.terminate() }
        let feed = try await client2.get("/v1/events?limit=1000")
        let ids = feed.json?["events"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(ids.count == Self.devices, "\(feed.text)")
        func acknowledgedIDs() -> [String] {
            let posts = receiver.posts
            return accepted.withLock { $0 }.sorted().flatMap { posts[$0].ids }
        }
        #expect(await eventually(timeout: 60) { acknowledgedIDs().count >= Self.devices }, "not every event arrived: \(second.stderr)")
        // SQLite: one daemon per file, so the dead run's webhook lease is void at once (no 30 s wait for it to run out).
        #expect(Date().timeIntervalSince(restarted) < 20)
        // Each event acknowledged exactly once, in outbox order: what repeated was only what no 2xx took.
        #expect(acknowledgedIDs() == ids)
        let posts = receiver.posts
        #expect(posts.allSatisfy { $0.verified == [true] })
        #expect(posts[0].ids == Array(ids.prefix(Self.batch)))
        #expect(!posts.dropFirst().contains { $0.ids.contains { posts[0].ids.contains($0) } }, "an acknowledged event was sent again")
        await receiver.stop()
    }
}
