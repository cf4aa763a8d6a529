import Foundation
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing

/// A transport plugin for a made-up platform, defined here and nowhere else: its addresses are
/// loft names (not hex), its payload is a line of text (not `aps`), it reads its own `pigeon`
/// override block and has no environment. It guards the seam of "one core for every platform":
/// this file plugs a new platform into the daemon with no change outside it.
final class PigeonTransport: TransportPlugin {
    struct Configuration: TransportConfiguration {
        var summary: String { "pigeons from the loft" }
        var platform: Platform? { Platform("pigeon") }

        func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
            guard case .token(let raw) = input, raw.hasPrefix("loft/"), raw.count > 5, raw.allSatisfy({ $0.isLetter || $0 == "/" }) else {
                throw AddressProblem(field: input.field, "a pigeon flies to a loft: expected \"loft/<name>\"")
            }
            return DeviceAddress(token: raw.lowercased())
        }

        func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
            var parts = [context.notificationID, content.title ?? "", content.body ?? ""]
            if case .string(let ring)? = content.override("pigeon")["ring"] { parts.append(ring) }
            let text = parts.joined(separator: "|")
            if text.utf8.count > PigeonTransport.maxPayload {
                throw ContentProblem(field: "payload", "is \(text.utf8.count) bytes; a pigeon carries at most \(PigeonTransport.maxPayload)")
            }
            return RenderedPayload(body: Array(text.utf8), expiration: content.expiration)
        }
    }

    static let kind = "pigeon"
    static let overrideBlocks = ["pigeon"]
    static let maxPayload = 96
    static func configuration(from node: ConfigNode) -> Configuration? { Configuration() }

    /// What the pigeons carried: (address, payload text).
    static let carried = Locked<[(String, String)]>([])
    /// When the loft `loft/lost` reported its pigeons lost (set by the test).
    static let lostSince = Locked<Date>(Date())

    let name: String
    init(name: String, configuration: Configuration, context: TransportContext) throws { self.name = name }

    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        batch.map { d in
            if d.token == "loft/lost" { return .tokenInvalid(since: Self.lostSince.withLock { $0 }, reason: "LoftAbandoned") }
            Self.carried.withLock { $0.append((d.token, String(decoding: d.payload.body, as: UTF8.self))) }
            return .delivered(receipt: "pigeon-\(d.messageID.lowercasedString.prefix(8))")
        }
    }
}

@Suite(.serialized) struct PlatformSeamTests {
    static let key = "seam-test-key-0123456789abcdef"

    @Test func aMadeUpPlatformRegistersDeliversRetiresAndReportsTheNeutralID() async throws {
        let dir = try TemporaryDirectory(prefix: "herald-seam")
        defer { dir.remove() }
        var registry = TransportRegistry()
        registry.register(PigeonTransport.self)
        let config = """
            {"storage": {"path": "herald.db"},
             "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "\(Self.key)", "scopes": ["admin"]}]},
             "apps": {"org.example.loft": {"routes": ["pigeons"]}},
             "transports": {"pigeons": {"type": "pigeon"}}}
            """
        let configuration = try DaemonConfiguration.parse(Data(config.utf8), baseDirectory: dir.path, registry: registry, environment: [:])
        let daemon = Daemon(configuration: configuration, registry: registry, storage: .embedded, logSink: RecordingLogHandler())
        let port = try await daemon.start()
        let c = HTTPTestClient(port: port, key: Self.key)
        do {
            // Registration: the plugin normalises its own addresses and refuses others, naming the field.
            var r = try await c.post("/v1/devices", #"{"app":"org.example.loft","user":"alice","token":"loft/Alice"}"#)
            #expect(r.status == 201, "\(r.text)")
            #expect(r.json?["token"]?.stringValue == "loft/alice" && r.json?["transport"]?.stringValue == "pigeons")
            #expect(r.json?["environment"] == nil)
            r = try await c.post("/v1/devices", #"{"app":"org.example.loft","user":"alice","token":"1f2e3d4c"}"#)
            #expect(r.status == 400 && r.errorField == "token" && r.text.contains("loft/<name>"), "\(r.text)")
            r = try await c.post("/v1/devices", #"{"app":"org.example.loft","user":"alice","token":"loft/alice","platform":"ios"}"#)
            #expect(r.status == 400 && r.errorField == "platform", "\(r.text)")

            // A notification: rendered by the plugin from the neutral fields and its own block.
            r = try await c.post("/v1/notifications", #"{"app":"org.example.loft","users":["alice"],"title":"Hi","body":"there","pigeon":{"ring":"blue"}}"#)
            #expect(r.status == 202, "\(r.text)")
            let id = try #require(r.json?["id"]?.stringValue)
            #expect(await eventually(timeout: 10) { PigeonTransport.carried.withLock { $0.contains { $0.0 == "loft/alice" } } })
            #expect(PigeonTransport.carried.withLock { $0.first { $0.0 == "loft/alice" }?.1 } == "\(id)|Hi|there|blue")
            let status = try await eventuallyValue(c, id) { $0["deliveries"]?.arrayValue?.first?["state"]?.stringValue == "delivered" }
            let delivery = try #require(status?["deliveries"]?.arrayValue?.first)
            #expect(delivery["message_id"]?.stringValue?.count == 36)
            #expect(delivery["receipt"]?.stringValue == "pigeon-" + String(delivery["message_id"]!.stringValue!.prefix(8)))
            #expect(delivery["apns_id"] == nil)

            // The plugin's size limit, at accept time: a 400 naming the route, nothing queued.
            r = try await c.post("/v1/notifications", #"{"app":"org.example.loft","users":["alice"],"body":"\#(String(repeating: "x", count: 100))"}"#)
            #expect(r.status == 400 && r.errorField == "payload" && r.text.contains("route pigeons (pigeon)"), "\(r.text)")
            // A block no registered plugin reads is an unknown key.
            r = try await c.post("/v1/notifications", #"{"app":"org.example.loft","users":["alice"],"body":"x","apns":{}}"#)
            #expect(r.status == 400 && r.errorField == "apns", "\(r.text)")

            // Retirement with the timestamp rule: lost after its registration retires the device;
            // a report from before a registration keeps it.
            r = try await c.post("/v1/devices", #"{"app":"org.example.loft","user":"bob","token":"loft/lost"}"#)
            #expect(r.status == 201)
            PigeonTransport.lostSince.withLock { $0 = Date().addingTimeInterval(-3600) }
            r = try await c.post("/v1/notifications", #"{"app":"org.example.loft","users":["bob"],"body":"early"}"#)
            let early = try #require(r.json?["id"]?.stringValue)
            _ = try await eventuallyValue(c, early) { $0["deliveries"]?.arrayValue?.first?["state"]?.stringValue == "invalid_token" }
            var devices = try await c.get("/v1/users/bob/devices?app=org.example.loft")
            #expect(devices.json?["devices"]?.arrayValue?.first?["invalidated_at"] == .null, "\(devices.text)")
            PigeonTransport.lostSince.withLock { $0 = Date().addingTimeInterval(3600) }
            r = try await c.post("/v1/notifications", #"{"app":"org.example.loft","users":["bob"],"body":"late"}"#)
            let late = try #require(r.json?["id"]?.stringValue)
            _ = try await eventuallyValue(c, late) { $0["deliveries"]?.arrayValue?.first?["state"]?.stringValue == "invalid_token" }
            devices = try await c.get("/v1/users/bob/devices?app=org.example.loft")
            #expect(devices.json?["devices"]?.arrayValue?.first?["invalidated_at"]?.stringValue != nil, "\(devices.text)")
            #expect(devices.json?["devices"]?.arrayValue?.first?["invalidation_reason"]?.stringValue == "LoftAbandoned")
        } catch {
            Issue.record(error)
        }
        _ = await daemon.shutdown()
    }

    /// The status of notification `id` once `done` holds for it (`nil` after 10 s).
    func eventuallyValue(_ c: HTTPTestClient, _ id: String, _ done: @escaping @Sendable (JSONValue) -> Bool) async throws -> JSONValue? {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let json = try await c.get("/v1/notifications/\(id)").json, done(json) { return json }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        Issue.record("notification \(id) did not reach the expected state")
        return nil
    }
}
