import Foundation
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing

/// `herald webhooks list` and `herald webhooks test`, the built binary against a receiver in
/// this process that verifies the signature.
@Suite(.serialized) struct WebhooksCLITests {
    static let secret = Secret("whsec_cli_test")

    func fixture(port: Int) throws -> (TemporaryDirectory, String) {
        let dir = try TemporaryDirectory(prefix: "herald-cli-webhooks")
        let config = try dir.write("config.json", """
            {
              "storage": {"path": "herald.db"},
              "apps": {"com.example.app": {"routes": ["dry"]}},
              "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
              "webhooks": [{"id": "backend", "url": "http://127.0.0.1:\(port)/hook", "secret": "${HOOK_SECRET}", "events": ["device"]}]
            }
            """)
        return (dir, config)
    }

    func run(_ dir: TemporaryDirectory, _ config: String, _ arguments: [String]) async throws -> ProcessResult {
        try await Run.herald(arguments + ["--config", config], environment: ["HOOK_SECRET": Self.secret.value], directory: dir.path)
    }

    @Test func testSendsASignedPingAndListShowsTheWebhook() async throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        let (dir, config) = try fixture(port: receiver.port)
        defer { dir.remove() }
        let ping = try await run(dir, config, ["webhooks", "test", "--id", "backend"])
        #expect(ping.status == 0, "\(ping.stderr)")
        #expect(ping.stdout.contains("backend: 200, ping"))
        let post = try #require(receiver.posts.first)
        #expect(post.verified == [true] && post.webhookID == "backend" && post.path == "/hook")
        #expect(post.events.first?["type"]?.stringValue == "ping")
        #expect(post.events.first?["data"]?["webhook"]?.stringValue == "backend")

        let list = try await run(dir, config, ["webhooks", "list"])
        #expect(list.status == 0, "\(list.stderr)")
        #expect(list.stdout.contains("backend  http://127.0.0.1:\(receiver.port)/hook  events=device  not started"), "\(list.stdout)")
        let unknown = try await run(dir, config, ["webhooks", "test", "--id", "nope"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("no webhook \"nope\"; configured: backend"))
        await receiver.stop()
    }

    @Test func aRedirectFailsTheTestAndIsNotFollowed() async throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret]) { _ in HTTPResponse(status: 307, headers: [("Location", "/elsewhere")]) }
        let (dir, config) = try fixture(port: receiver.port)
        defer { dir.remove() }
        let ping = try await run(dir, config, ["webhooks", "test", "--id", "backend"])
        #expect(ping.status == 1)
        #expect(ping.stderr.contains("answered 307 (a redirect: not followed)"), "\(ping.stderr)")
        #expect(receiver.posts.map(\.path) == ["/hook"])
        await receiver.stop()
    }
}
