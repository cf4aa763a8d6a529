import Foundation
import HeraldAPNs
import HeraldCore
import HeraldLogTransport
import HeraldSQLite
import HeraldTestKit
import Testing

/// A transport plugin with one required key, to check that plugins validate their own section.
final class FakeAPNsTransport: TransportPlugin {
    struct Configuration: TransportConfiguration {
        var environment: APNsEnvironment
        var summary: String { "fake \(environment.rawValue)" }
        var platform: Platform? { .ios }
        func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
            try APNsRoute.address(input, attributes: attributes, environment: environment)
        }
        func canCarry(_ attributes: DeviceAttributes) -> Bool { APNsRoute.canCarry(attributes, environment: environment) }
        func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
            try APNsRoute.render(content, context: context)
        }
    }
    static let kind = "fake-apns"
    static let overrideBlocks = [APNsOptions.block]
    static func configuration(from node: ConfigNode) -> Configuration? {
        let env = node.oneOf("environment", APNsEnvironment.self, required: true)
        let keyID = node.string("keyId", required: true)
        guard let env, keyID != nil else { return nil }
        return Configuration(environment: env)
    }
    let name: String
    init(name: String, configuration: Configuration, context: TransportContext) throws { self.name = name }
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] { batch.map { _ in .delivered(receipt: nil) } }
}

func testRegistry() -> TransportRegistry {
    var registry = TransportRegistry()
    registry.register(LogTransport.self)
    registry.register(FakeAPNsTransport.self)
    registry.register(storage: SQLiteStorageConfiguration.self)
    return registry
}

func parse(_ json: String, environment: [String: String] = [:], base: String? = "/etc/herald") throws(ConfigurationError) -> HeraldConfiguration {
    try HeraldConfiguration.parse(Data(json.utf8), source: "test.json", baseDirectory: base, registry: testRegistry(),
                                  environment: environment)
}

func errors(_ json: String, environment: [String: String] = [:]) -> [String] {
    do {
        _ = try parse(json, environment: environment)
        return []
    } catch {
        return error.errors.map(\.description)
    }
}

let minimal = """
{"apps": {"com.example.app": {"routes": ["dry"]}}, "transports": {"dry": {"type": "log"}}}
"""

@Suite struct ConfigurationTests {
    @Test func minimalConfigurationHasDefaults() throws {
        let c = try parse(minimal)
        let app = try #require(c.apps["com.example.app"])
        #expect(app.topic == "com.example.app")
        #expect(app.foreground == .pushOnly)
        #expect(app.maxDevicesPerUser == 100)
        #expect(app.maxRegisteredDevicesPerUser == 100)
        #expect(c.storage.driver == "sqlite")
        #expect(try c.sqliteStorage() == SQLiteStorageConfiguration(path: "/etc/herald/var/herald.db", synchronous: .full, busyTimeout: 5))
        #expect(c.api.listen == ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(c.api.keys.isEmpty)
        #expect(c.log.level == .info && c.log.format == .logfmt)
        #expect(c.delivery.retry == RetryPolicy())
        #expect(c.transports["dry"]?.kind == "log")
    }

    @Test func relativePathsResolveAgainstTheConfigFolder() throws {
        let c = try parse("""
        {"storage": {"path": "data/h.db"}, "apps": {"a": {"routes": ["dry"]}},
         "transports": {"dry": {"type": "log", "path": "../out/d.jsonl"}, "abs": {"type": "log", "path": "/tmp/x.jsonl"}}}
        """, base: "/srv/herald/conf")
        #expect(try c.sqliteStorage().path == "/srv/herald/conf/data/h.db")
        #expect(c.transports["dry"]?.configuration.summary == "/srv/herald/out/d.jsonl")
        #expect(c.transports["abs"]?.configuration.summary == "/tmp/x.jsonl")
    }

    @Test func environmentVariablesAreSubstituted() throws {
        let c = try parse("""
        {"apps": {"a": {"routes": ["dry"], "topic": "com.${BRAND}.app"}}, "transports": {"dry": {"type": "log"}},
         "api": {"keys": [{"id": "k", "secret": "${KEY}", "scopes": ["send"]}]}}
        """, environment: ["KEY": "s3cret-s3cret-s3cret", "BRAND": "acme"])
        #expect(c.apps["a"]?.topic == "com.acme.app")
        #expect(c.api.keys[0].secret.value == "s3cret-s3cret-s3cret")
        #expect("\(c.api.keys[0].secret)" == "<redacted>")
    }

    @Test func literalDollarBraceIsEscaped() throws {
        let c = try parse("""
        {"apps": {"a": {"routes": ["dry"], "topic": "x$${NOT_A_VAR}"}}, "transports": {"dry": {"type": "log"}}}
        """)
        #expect(c.apps["a"]?.topic == "x${NOT_A_VAR}")
    }

    @Test func missingEnvironmentVariableIsNamedWithItsPath() {
        let e = errors("""
        {"apps": {"a": {"routes": ["dry"]}}, "transports": {"dry": {"type": "log"}},
         "api": {"keys": [{"id": "k", "secret": "${HERALD_API_KEY}", "scopes": ["send"]}]}}
        """)
        #expect(e == ["api.keys[0].secret: environment variable HERALD_API_KEY is not set"])
    }

    @Test func everyErrorIsReportedAtOnceWithItsPath() {
        let e = errors("""
        {"storage": {"driver": "postgres", "synchronous": "sometimes", "busyTimeout": "soon"},
         "apps": {"com.example.app": {"routes": ["apnz", "dry", "dry"], "foreground": "maybe", "maxDevicesPerUser": 0},
                  "other": {"routes": []}, "third": "nope"},
         "transports": {"apns": {"type": "apns-h3"}, "dry": {"type": "log"}, "x": {"type": "fake-apns", "environment": "staging"},
                        "y": 42, "z": {"path": "a"}},
         "api": {"listen": "localhost", "keys": [{"id": "k", "secret": "short", "scopes": ["send", "root"]}, {"id": "k", "secret": "0123456789abcdef", "scopes": []}],
                 "maxBodyBytes": 10},
         "log": {"level": "loud", "format": "xml"},
         "delivery": {"maxAttempts": 0, "jitter": 2, "initialBackoff": "10m", "maxBackoff": "1m"}}
        """)
        let expected = [
            // The registered drivers; an unknown driver's keys are nobody's to judge (the SQLite driver's
            // bad values: SQLiteStorageConfigurationTests).
            "storage.driver: unknown value \"postgres\"; expected one of: sqlite",
            "transports.apns.type: unknown transport type \"apns-h3\"; known: fake-apns, log",
            "transports.x.environment: unknown value \"staging\"; expected one of: sandbox, production",
            "transports.x.keyId: is required",
            "transports.y: expected an object with a \"type\", found a number",
            "transports.z.type: is required",
            "apps[\"com.example.app\"].routes[0]: unknown transport \"apnz\"; defined: apns, dry, x, y, z",
            "apps[\"com.example.app\"].routes[2]: transport \"dry\" is listed twice",
            "apps[\"com.example.app\"].foreground: unknown value \"maybe\"; expected one of: push-only, local-first, local-and-push, local-only",
            "apps[\"com.example.app\"].maxDevicesPerUser: must be between 1 and 10000, found 0",
            "apps.other.routes: must not be empty",
            "apps.third: expected an object with \"routes\", found a string",
            "api.listen: expected host:port such as \"127.0.0.1:8080\" or \"[::1]:8080\", found \"localhost\"",
            "api.keys[0].scopes[1]: unknown scope \"root\"; expected one of: send, devices, admin",
            "api.keys[0].secret: is too short (5 characters); use at least 16",
            "api.keys[1].scopes: must grant at least one scope",
            "api.keys[1].id: duplicate key id \"k\"",
            "api.maxBodyBytes: must be between 1024 and 67108864, found 10",
            "log.level: unknown value \"loud\"; expected one of: trace, debug, info, notice, warning, error, critical",
            "log.format: unknown value \"xml\"; expected one of: logfmt, json",
            "delivery.maxAttempts: must be between 1 and 100, found 0",
            "delivery.jitter: must be between 0 and 1, found 2",
            "delivery.maxBackoff: must not be less than initialBackoff",
        ]
        for line in expected { #expect(e.contains(line), "missing: \(line)\nall:\n\(e.joined(separator: "\n"))") }
        #expect(e.count == expected.count, "\(e.joined(separator: "\n"))")
    }

    @Test func theRegistrationBoundPerUserIsReadNamedWhenInvalidAndNeverBelowTheFanOutByDefault() throws {
        func app(_ keys: String) throws -> AppConfiguration {
            try #require(try parse(#"{"apps": {"a": {"routes": ["dry"]\#(keys)}}, "transports": {"dry": {"type": "log"}}}"#).apps["a"])
        }
        #expect(try app(#", "maxRegisteredDevicesPerUser": 5"#).maxRegisteredDevicesPerUser == 5)
        // Unset, it follows a fan-out bound above 100, so a config that reached more devices keeps them.
        #expect(try app(#", "maxDevicesPerUser": 500"#).maxRegisteredDevicesPerUser == 500)
        #expect(try app(#", "maxDevicesPerUser": 20"#).maxRegisteredDevicesPerUser == 100)
        for bad in ["0", "10001", "\"many\""] {
            let e = errors(#"{"apps": {"a": {"routes": ["dry"], "maxRegisteredDevicesPerUser": \#(bad)}}, "transports": {"dry": {"type": "log"}}}"#)
            #expect(e.count == 1 && e.first?.hasPrefix("apps.a.maxRegisteredDevicesPerUser: ") == true, "\(bad): \(e)")
        }
    }

    @Test func unknownTransportTypeNamesTheKnownTypes() {
        // The route to the invalid transport is not reported as unknown: the transport's own error says what is wrong.
        #expect(errors("""
        {"apps": {"a": {"routes": ["apns"]}}, "transports": {"apns": {"type": "apns-h3"}}}
        """) == ["transports.apns.type: unknown transport type \"apns-h3\"; known: fake-apns, log"])
    }

    @Test func nonLoopbackWithoutKeysIsRefused() {
        func api(_ json: String) -> [String] { errors(minimal.replacingOccurrences(of: "}}}", with: "}}, \"api\": \(json)}")) }
        let refusal = "api.keys: at least one key is required when api.listen (0.0.0.0:8080) is not a loopback address: "
            + "Herald will not serve an unauthenticated API to the network; add a key such as "
            + #"{"id": "backend", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]} or listen on 127.0.0.1"#
        #expect(api(#"{"listen": "0.0.0.0:8080"}"#) == [refusal])
        // An empty list is no key either.
        #expect(api(#"{"listen": "0.0.0.0:8080", "keys": []}"#) == [refusal])
        #expect(api(#"{"listen": "0.0.0.0:8080", "keys": [{"id": "k", "secret": "0123456789abcdef", "scopes": ["send"]}]}"#).isEmpty)
        #expect(api(#"{"listen": "[::1]:9000"}"#).isEmpty)
        #expect(api(#"{"listen": "127.0.0.1:9000", "keys": []}"#).isEmpty)
    }

    @Test func structuralErrors() {
        #expect(errors("[1,2]") == ["expected a JSON object at the top level, found an array"])
        #expect(errors("{").first?.hasPrefix("invalid JSON") == true)
        #expect(errors("{}") == ["transports: is required", "apps: is required"])
        #expect(errors("{\"apps\": {}, \"transports\": {}}") == ["transports: must define at least one transport", "apps: must define at least one app"])
    }

    @Test func unknownKeysAreWarnedWithSuggestions() throws {
        let c = try parse("""
        {"apps": {"a": {"routes": ["dry"], "maxDevicePerUser": 3}}, "transports": {"dry": {"type": "log", "pth": "x"}},
         "log": {"levle": "debug"}}
        """)
        let w = c.warnings.map(\.description)
        #expect(w.contains("apps.a.maxDevicePerUser: unknown key, ignored; did you mean \"maxDevicesPerUser\"?"))
        #expect(w.contains("transports.dry.pth: unknown key, ignored; did you mean \"path\"?"))
        #expect(w.contains("log.levle: unknown key, ignored; did you mean \"level\"?"))
        #expect(w.count == 3)
    }

    /// Issue 24, item 16: a misspelt section would run Herald on defaults (`"storge"`: a new,
    /// empty database in the default place), so an unknown top-level key is an error.
    @Test func anUnknownTopLevelKeyIsAnErrorWithASuggestion() {
        let typo = errors("""
        {"storge": {"path": "/srv/herald/herald.db"}, "apps": {"a": {"routes": ["dry"]}}, "transports": {"dry": {"type": "log"}}}
        """)
        // The core's sections; a module's (matrix) are known where it is registered.
        let known = "(known: storage, apps, transports, api, log, delivery, server; an unknown section is refused "
            + "rather than ignored, so that a misspelt one does not run Herald on defaults)"
        #expect(typo == ["storge: unknown top-level key; did you mean \"storage\"? \(known)"])
        let far = errors(minimal.replacingOccurrences(of: "}}}", with: "}}, \"extra\": true, \"zzz\": {}}"))
        #expect(far == ["extra: unknown top-level key \(known)", "zzz: unknown top-level key \(known)"])
        // Not reported a second time as a warning, and every known section is accepted.
        do {
            _ = try parse(#"{"storge": {}, "apps": {"a": {"routes": ["dry"]}}, "transports": {"dry": {"type": "log"}}}"#)
            Issue.record("a configuration with an unknown top-level key was accepted")
        } catch {
            #expect(error.warnings.isEmpty, "\(error.warnings)")
        }
        #expect(errors(minimal.replacingOccurrences(of: "}}}", with: #"}}, "log": {}, "delivery": {}, "server": {}, "api": {}, "storage": {}}"#)).isEmpty)
    }

    /// Issue 24, item 15: two keys with one secret would authenticate as whichever came last.
    @Test func twoAPIKeysWithTheSameSecretAreRefusedNamingBothIds() {
        let secret = "the-same-secret-0123456789"
        let e = errors(minimal.replacingOccurrences(of: "}}}", with: """
        }}, "api": {"keys": [{"id": "admin", "secret": "${A}", "scopes": ["admin"]},
                             {"id": "devices", "secret": "${B}", "scopes": ["devices"]},
                             {"id": "other", "secret": "another-secret-0123456789", "scopes": ["send"]}]}}
        """), environment: ["A": secret, "B": secret])
        #expect(e == ["api.keys: keys \"admin\" and \"devices\" have the same secret; give each key its own "
                      + "(a request would be authenticated as one of them, with its scopes)"])
        #expect(!e.joined().contains(secret))
        #expect(errors(minimal.replacingOccurrences(of: "}}}", with: """
        }}, "api": {"keys": [{"id": "admin", "secret": "${A}", "scopes": ["admin"]}, {"id": "devices", "secret": "${B}", "scopes": ["devices"]}]}}
        """), environment: ["A": secret, "B": secret + "x"]).isEmpty)
    }

    /// Issue 24, item 14: an app id has the same bound as everywhere (FieldLimits.appIDBytes).
    @Test func anAppIdOverTheBoundIsRefused() {
        let long = String(repeating: "a", count: FieldLimits.appIDBytes.upperBound + 1)
        #expect(errors(minimal.replacingOccurrences(of: "com.example.app", with: long))
                == ["apps.\(long): app id must be at most 256 bytes, found 257"])
        #expect(errors(minimal.replacingOccurrences(of: "com.example.app", with: String(repeating: "a", count: 256))).isEmpty)
    }

    /// Issue 24, item 14: a notification's `users` have the bound `/v1/devices` has.
    @Test func aNotificationsUsersHaveTheUserIdBound() throws {
        func issues(_ users: [String]) -> [String] {
            let json: JSONValue = ["app": "a", "users": .array(users.map { .string($0) }), "alert": "x"]
            do { _ = try NotificationRequest.fromAPI(json); return [] } catch { return error.issues.map(\.description) }
        }
        #expect(issues(["alice", String(repeating: "u", count: 10_000)]) == ["users[1]: must be at most 256 bytes, found 10000"])
        #expect(issues([String(repeating: "u", count: 256)]).isEmpty)
    }

    @Test func secretsNeverAppearInErrors() {
        let e = errors("""
        {"apps": {"a": {"routes": ["dry"]}}, "transports": {"dry": {"type": "log"}},
         "api": {"keys": [{"id": "k", "secret": "tiny-secret", "scopes": ["send"]}]}}
        """)
        #expect(!e.joined().contains("tiny-secret"))
        #expect(!e.isEmpty)
    }

    @Test func durationsParse() {
        #expect(JSONNode.parseDuration("250ms") == 0.25)
        #expect(JSONNode.parseDuration("30s") == 30)
        #expect(JSONNode.parseDuration("5m") == 300)
        #expect(JSONNode.parseDuration("2h") == 7200)
        #expect(JSONNode.parseDuration("7d") == 604_800)
        #expect(JSONNode.parseDuration("12") == 12)
        #expect(JSONNode.parseDuration("-1s") == nil)
        #expect(JSONNode.parseDuration("soon") == nil)
    }

    @Test func listenAddresses() {
        #expect(ListenAddress("127.0.0.1:8080") == ListenAddress(host: "127.0.0.1", port: 8080))
        #expect(ListenAddress("[::1]:80")?.host == "::1")
        #expect(ListenAddress("[::1]:80")?.isLoopback == true)
        #expect(ListenAddress("0.0.0.0:1")?.isLoopback == false)
        #expect(ListenAddress("host:99999") == nil)
        #expect(ListenAddress(":80") == nil)
        #expect(ListenAddress("[::1]:80")?.description == "[::1]:80")
    }

    @Test func routingPicksTheFirstRouteThatCanCarryTheEnvironment() throws {
        let c = try parse("""
        {"apps": {"a": {"routes": ["prod", "sand", "dry"]}},
         "transports": {"prod": {"type": "fake-apns", "environment": "production", "keyId": "K"},
                        "sand": {"type": "fake-apns", "environment": "sandbox", "keyId": "K"},
                        "dry": {"type": "log"}}}
        """)
        let app = try #require(c.apps["a"])
        let token = DeviceAddressInput.token(String(repeating: "ab", count: 32))
        #expect(c.firstRoute(app: app, input: token, attributes: .apns(.production))?.transport == "prod")
        #expect(c.firstRoute(app: app, input: token, attributes: .apns(.sandbox))?.transport == "sand")
        #expect(c.firstRoute(app: app, input: token, attributes: DeviceAttributes())?.address.attributes == .apns(.production))
    }
}
