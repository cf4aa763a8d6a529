import Foundation
import HeraldCore
import HeraldLocalTransport
import HeraldLogTransport
import Testing

@Suite struct ForegroundConfigurationTests {
    static let secret = "client-secret-0123456789abcdef-0123456789"

    static func config(app: String, api: String = "{}") -> String {
        """
        {"apps": {"com.example.app": \(app)},
         "transports": {"dry": {"type": "log"}, "stream": {"type": "local"}},
         "api": \(api)}
        """
    }

    func parse(_ json: String, environment: [String: String] = [:]) throws(ConfigurationError) -> HeraldConfiguration {
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        registry.register(LocalTransport.self)
        return try HeraldConfiguration.parse(Data(json.utf8), source: "test.json", baseDirectory: "/etc/herald",
                                             registry: registry, environment: environment)
    }

    func errors(_ json: String, environment: [String: String] = [:]) -> [String] {
        do { _ = try parse(json, environment: environment); return [] } catch { return error.errors.map(\.description) }
    }

    @Test func defaults() throws {
        let c = try parse(Self.config(app: #"{"routes": ["dry"]}"#))
        let app = try #require(c.apps["com.example.app"])
        #expect(app.foreground == .pushOnly)
        #expect(app.clientSecret == nil)
        #expect(app.presenceGrace == 0)
        #expect(app.inbox == InboxConfiguration(ttl: 86_400, maxPerUser: 100))
        #expect(c.api.demo == false)
        #expect(c.api.streams == StreamsConfiguration(heartbeat: 15, maxStreams: 10_000, bufferBytes: 65_536))
    }

    @Test func policiesInDesignOrder() {
        #expect(ForegroundPolicy.allCases.map(\.rawValue) == ["push-only", "local-first", "local-and-push", "local-only"])
    }

    @Test func everyKeyIsRead() throws {
        let c = try parse(Self.config(
            app: #"{"routes": ["stream", "dry"], "foreground": "local-first", "clientSecret": "${SECRET}", "presenceGrace": "30s", "inbox": {"ttl": "2h", "maxPerUser": 5}}"#,
            api: #"{"demo": true, "streams": {"heartbeat": 0.5, "maxStreams": 20000, "bufferBytes": 4096}}"#),
            environment: ["SECRET": Self.secret])
        let app = try #require(c.apps["com.example.app"])
        #expect(app.foreground == .localFirst)
        #expect(app.clientSecret?.value == Self.secret)
        #expect(app.presenceGrace == 30)
        #expect(app.inbox == InboxConfiguration(ttl: 7200, maxPerUser: 5))
        #expect(c.api.demo)
        #expect(c.api.streams == StreamsConfiguration(heartbeat: 0.5, maxStreams: 20_000, bufferBytes: 4096))
        #expect(c.warnings.isEmpty)
        // Every policy other than push-only parses with a secret and a local route.
        for policy in ["local-and-push", "local-only"] {
            let other = try parse(Self.config(app: #"{"routes": ["stream"], "foreground": "\#(policy)", "clientSecret": "\#(Self.secret)"}"#))
            #expect(other.apps["com.example.app"]?.foreground.rawValue == policy)
        }
        // A push-only app may hold a secret (to mint tokens) without a local route.
        let pushOnly = try parse(Self.config(app: #"{"routes": ["dry"], "clientSecret": "\#(Self.secret)"}"#))
        #expect(pushOnly.apps["com.example.app"]?.clientSecret != nil)
    }

    @Test func clientSecretIsRequiredLongEnoughAndNeverEchoed() {
        #expect(errors(Self.config(app: #"{"routes": ["stream"], "foreground": "local-only"}"#)) == [
            "apps[\"com.example.app\"].clientSecret: is required when foreground is \"local-only\": client tokens for the app's streams "
            + "are signed with it; add \"clientSecret\": \"${CLIENT_SECRET}\" (at least 32 bytes)",
        ])
        let short = errors(Self.config(app: #"{"routes": ["stream"], "foreground": "local-first", "clientSecret": "short-secret-value"}"#))
        #expect(short.count == 1)
        #expect(short.first?.hasPrefix("apps[\"com.example.app\"].clientSecret: is too short (18 bytes); use at least 32 random bytes") == true)
        #expect(short.allSatisfy { !$0.contains("short-secret-value") })
        #expect(errors(Self.config(app: #"{"routes": ["stream"], "foreground": "local-first", "clientSecret": 42}"#)) == [
            "apps[\"com.example.app\"].clientSecret: expected a string, found a number",
        ])
        #expect(errors(Self.config(app: #"{"routes": ["stream"], "foreground": "local-first", "clientSecret": "${NOPE}"}"#))
                == ["apps[\"com.example.app\"].clientSecret: environment variable NOPE is not set"])
    }

    @Test func localPoliciesNeedALocalRoute() {
        let e = errors(Self.config(app: #"{"routes": ["dry"], "foreground": "local-and-push", "clientSecret": "\#(Self.secret)"}"#))
        #expect(e == ["apps[\"com.example.app\"].routes: foreground \"local-and-push\" needs a transport of type \"local\" among the routes "
                      + "(streams deliver through it); add \"stream\" to routes, or set foreground to \"push-only\""])
        // No local transport defined at all: the message says how to define one.
        let none = errors("""
            {"apps": {"a": {"routes": ["dry"], "foreground": "local-first", "clientSecret": "\(Self.secret)"}},
             "transports": {"dry": {"type": "log"}}}
            """)
        #expect(none.count == 1)
        #expect(none.first?.hasPrefix("apps.a.routes: foreground \"local-first\" needs a transport of type \"local\"") == true)
        #expect(none.first?.contains(#"define one, e.g. "transports": {"local": {"type": "local"}}, and add "local" to routes"#) == true)
    }

    @Test func badValuesNameTheirPaths() {
        let e = errors(Self.config(
            app: #"{"routes": ["stream"], "foreground": "local-first", "clientSecret": "\#(Self.secret)", "presenceGrace": -1, "inbox": {"ttl": 0, "maxPerUser": 0}}"#,
            api: #"{"demo": "yes", "streams": {"heartbeat": 0, "maxStreams": 0, "bufferBytes": 10}}"#))
        #expect(e.contains("apps[\"com.example.app\"].presenceGrace: must be at least 0.0 seconds"))
        #expect(e.contains("apps[\"com.example.app\"].inbox.ttl: must be more than 0 seconds"))
        #expect(e.contains("apps[\"com.example.app\"].inbox.maxPerUser: must be between 1 and 1000000, found 0"))
        #expect(e.contains("api.demo: expected true or false, found a string"))
        #expect(e.contains("api.streams.heartbeat: must be more than 0 seconds"))
        #expect(e.contains("api.streams.maxStreams: must be between 1 and 1000000, found 0"))
        #expect(e.contains("api.streams.bufferBytes: must be between 256 and 67108864, found 10"))
        #expect(e.count == 7, "\(e)")
        #expect(errors(Self.config(app: #"{"routes": ["dry"], "inbox": 5}"#, api: #"{"streams": []}"#)) == [
            "apps[\"com.example.app\"].inbox: expected an object with \"ttl\" and \"maxPerUser\", found a number",
            "api.streams: expected an object with \"heartbeat\", \"maxStreams\", \"bufferBytes\", \"maxPerDevice\" and \"maxPerUser\", found an array",
        ])
    }
}
