import Foundation
import HeraldCore
import HeraldEvents
import HeraldLogTransport
import Testing

/// The `webhooks` and `events` sections: what they accept, and errors that name the key.
struct WebhooksConfigurationTests {
    func parse(_ sections: String, environment: [String: String] = ["HOOK_SECRET": "s3cret-new", "HOOK_OLD": "s3cret-old"]) throws(ConfigurationError) -> HeraldConfiguration {
        var registry = TransportRegistry()
        registry.register(section: WebhooksConfiguration.self)
        registry.register(section: EventsConfiguration.self)
        registry.register(LogTransport.self)
        let json = #"{"apps": {"com.example.app": {"routes": ["t"]}}, "transports": {"t": {"type": "log"}}, \#(sections)}"#
        return try HeraldConfiguration.parse(Data(json.utf8), baseDirectory: nil, registry: registry, environment: environment)
    }

    func errors(_ sections: String) -> String {
        do {
            _ = try parse(sections)
            return ""
        } catch {
            return error.description
        }
    }

    @Test func readsAWebhookWithRotatedSecretsFromTheEnvironment() throws {
        let c = try parse(#"""
            "webhooks": [{"id": "backend", "url": "https://hooks.example.com:8443/herald?x=1", "secrets": ["${HOOK_SECRET}", "${HOOK_OLD}"],
                          "events": ["delivery", "device.retired"], "apps": ["com.example.app"], "batch": 50, "timeout": "2s", "retention": "1h"}],
            "events": {"retention": "24h"}
            """#)
        let w = try #require(c.webhooks.first)
        #expect(w.id == "backend")
        #expect(w.url == (try WebhookURL("https://hooks.example.com:8443/herald?x=1")))
        #expect(w.url.port == 8443 && w.url.secure && w.url.path == "/herald?x=1")
        #expect(w.secrets.map(\.value) == ["s3cret-new", "s3cret-old"])
        #expect(w.events == ["delivery", "device.retired"])
        #expect(w.apps == ["com.example.app"])
        #expect(w.batch == 50 && w.timeout == 2 && w.retention == 3600)
        #expect(c.events.retention == 86400)
        #expect(!"\(w.secrets)".contains("s3cret"))
    }

    @Test func defaults() throws {
        let c = try parse(#""webhooks": [{"id": "a", "url": "http://127.0.0.1/hook", "secret": "${HOOK_SECRET}", "events": ["delivery.delivered"]}]"#)
        let w = try #require(c.webhooks.first)
        #expect(w.batch == 100 && w.timeout == 10 && w.retention == 72 * 3600 && w.apps == nil)
        #expect(w.url.port == 80 && !w.url.secure)
        #expect(c.events.retention == 72 * 3600)
        #expect(try parse("\"events\": {}").webhooks.isEmpty)
    }

    @Test func anUnknownEventTypeIsAnErrorNamingIt() {
        let e = errors(#""webhooks": [{"id": "a", "url": "http://127.0.0.1/", "secret": "x", "events": ["delivery", "delivery.bounced"]}]"#)
        #expect(e.contains("webhooks[0].events[1]"))
        #expect(e.contains("unknown event type \"delivery.bounced\""))
    }

    @Test func anUnknownKeyIsAnErrorNamingIt() {
        let e = errors(#""webhooks": [{"id": "a", "url": "http://127.0.0.1/", "secret": "x", "events": ["delivery"], "retries": 3}]"#)
        #expect(e.contains("webhooks[0].retries: unknown key"))
        #expect(errors(#""events": {"retention": "1h", "keep": true}"#).contains("events.keep: unknown key"))
    }

    @Test func badValuesAreErrorsNamingTheField() {
        #expect(errors(#""webhooks": [{"id": "a", "url": "ftp://x/", "secret": "x", "events": ["delivery"]}]"#).contains("webhooks[0].url: expected an http:// or https:// URL"))
        #expect(errors(#""webhooks": [{"id": "a", "url": "https://u:p@x/", "secret": "x", "events": ["delivery"]}]"#).contains("webhooks[0].url: put no credentials"))
        #expect(errors(#""webhooks": [{"id": "a", "url": "https://x/", "events": ["delivery"]}]"#).contains("webhooks[0].secrets: is required"))
        #expect(errors(#""webhooks": [{"id": "a", "url": "https://x/", "secret": "x", "events": ["delivery"], "apps": ["other"]}]"#).contains("webhooks[0].apps[0]: no app \"other\""))
        #expect(errors(#""webhooks": [{"id": "a", "url": "https://x/", "secret": "x", "events": ["delivery"]}, {"id": "a", "url": "https://y/", "secret": "x", "events": ["device"]}]"#)
            .contains("webhooks[1].id: another webhook has the id \"a\""))
        #expect(errors(#""webhooks": [{"id": "a", "url": "https://x/", "secret": "x", "events": []}]"#).contains("webhooks[0].events: must not be empty"))
        #expect(errors(#""webhooks": {"id": "a"}"#).contains("webhooks: expected an array"))
        // A secret from an unset variable names the variable, never a value.
        let unset = (try? parse(#""webhooks": [{"id": "a", "url": "https://x/", "secret": "${NOPE}", "events": ["delivery"]}]"#, environment: [:])) == nil
        #expect(unset)
    }

    @Test func selectorsMatchTypesAndPrefixes() {
        #expect(EventType.deliveryParked.matches("delivery"))
        #expect(EventType.deliveryParked.matches("delivery.parked"))
        #expect(!EventType.deliveryParked.matches("deliv"))
        #expect(!EventType.isSelector("ping"))
        #expect(EventType.isSelector("transport"))
        let filter = EventFilter(types: ["device.retired"], apps: ["a"])
        #expect(filter.admits(EventRecord(type: "device.retired", createdAt: Date(), app: "a", data: "{}")))
        #expect(!filter.admits(EventRecord(type: "device.retired", createdAt: Date(), app: "b", data: "{}")))
        #expect(!filter.admits(EventRecord(type: "device.removed", createdAt: Date(), app: "a", data: "{}")))
        #expect(EventFilter(types: ["transport"], apps: ["a"]).admits(EventRecord.transport("t", paused: true, reason: "x", now: Date())))
    }
}
