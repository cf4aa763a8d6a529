import Foundation
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing

/// SIGHUP's reload, called directly.
@Suite(.serialized, .stopsDaemons) struct ReloadTests {
    @Test func newKeysAndAppsApplyUnchangedTransportsStay() async throws {
        let made = Locked<[String: Int]>([:])
        let d = try await TestDaemon.start(
            config: TestDaemon.configJSON(transports: #"{"t": {"type": "test"}, "u": {"type": "test", "label": "one"}}"#),
            transports: { name in
                made.withLock { $0[name, default: 0] += 1 }
                return ScriptedTransport(name: name, clock: SystemClock())
            })
        #expect(try await d.client.get("/metrics").status == 200)

        let newKey = "rotated-key-0123456789abcdef"
        var json = TestDaemon.configJSON(transports: #"{"t": {"type": "test"}, "u": {"type": "test", "label": "two"}, "v": {"type": "test"}}"#)
        json = json.replacingOccurrences(of: TestDaemon.key, with: newKey)
            .replacingOccurrences(of: #""org.other.app""#, with: #""org.third.app""#)
        let outcome = await d.daemon.reload(try TestDaemon.parse(json, directory: d.directory))
        #expect(outcome == .applied(added: ["v"], changed: ["u"], removed: []))
        #expect(made.withLock { $0 } == ["t": 1, "u": 2, "v": 1])
        #expect(try await d.client.get("/metrics").status == 401)
        #expect(try await HTTPTestClient(port: d.port, key: newKey).get("/metrics").status == 200)
        let r = try await HTTPTestClient(port: d.port, key: newKey)
            .post("/v1/devices", #"{"app":"org.third.app","user":"a","token":"\#(TestDaemon.token(1))"}"#)
        #expect(r.status == 201)
        #expect(await eventually { (try? await HTTPTestClient(port: d.port).get("/readyz").json?["transports"]?["v"]) == "started" })
    }

    @Test func badOrRestartOnlyChangesAreRefusedAndTheOldConfigurationStays() async throws {
        let d = try await TestDaemon.start()
        let moved = TestDaemon.configJSON().replacingOccurrences(of: "127.0.0.1:0", with: "127.0.0.1:1")
        guard case .refused(let reasons) = await d.daemon.reload(try TestDaemon.parse(moved, directory: d.directory)) else {
            Issue.record("a listen change must be refused"); return
        }
        #expect(reasons.first?.contains("api.listen") == true)
        #expect(d.logs.text.contains("configuration not reloaded"))
        #expect(try await d.client.get("/metrics").status == 200)

        // A file with errors: refused with the errors, nothing changes.
        let f = try await TestDaemon.start(fromFile: true)
        try TestDaemon.configJSON().replacingOccurrences(of: #""maxAttempts": 3"#, with: #""maxAttempts": "many""#)
            .write(toFile: f.directory.file("config.json"), atomically: true, encoding: .utf8)
        guard case .refused(let errors) = await f.daemon.reloadFromFile() else { Issue.record("a bad file must be refused"); return }
        #expect(errors.contains { $0.contains("delivery.maxAttempts") })
        #expect(f.daemon.configuration.delivery.retry.maxAttempts == 3)
        #expect(try await f.client.get("/metrics").status == 200)
        // A good file applies.
        try TestDaemon.configJSON().replacingOccurrences(of: #""maxAttempts": 3"#, with: #""maxAttempts": 4"#)
            .write(toFile: f.directory.file("config.json"), atomically: true, encoding: .utf8)
        #expect(await f.daemon.reloadFromFile() == .applied(added: [], changed: [], removed: []))
        #expect(f.daemon.configuration.delivery.retry.maxAttempts == 4)
    }

    @Test func droppingEveryKeyOfANetworkListenerIsRefused() async throws {
        let network = TestDaemon.configJSON().replacingOccurrences(of: "127.0.0.1:0", with: "0.0.0.0:0")
        let d = try await TestDaemon.start(config: network, fromFile: true)
        // SIGHUP's path: the file now says "keys": [] on 0.0.0.0.
        let emptied = network.replacingOccurrences(of: #"(?s)"keys": \[.*?\],"#, with: #""keys": [],"#, options: .regularExpression)
        #expect(emptied.contains(#""keys": [],"#))
        try emptied.write(toFile: d.directory.file("config.json"), atomically: true, encoding: .utf8)
        guard case .refused(let errors) = await d.daemon.reloadFromFile() else { Issue.record("an open network API must be refused"); return }
        #expect(errors.contains { $0.contains("api.keys") && $0.contains("api.listen (0.0.0.0:0)") }, "\(errors)")
        #expect(d.logs.text.contains("configuration not reloaded; keeping the running one"))
        #expect(d.logs.text.contains("api.keys: at least one key is required"))
        #expect(try await d.client.get("/metrics").status == 200)
        #expect(try await HTTPTestClient(port: d.port).get("/metrics").status == 401)

        // A configuration built in code gets the same answer.
        var next = try TestDaemon.parse(network, directory: d.directory)
        next.configuration.api.keys = []
        guard case .refused(let reasons) = await d.daemon.reload(next) else { Issue.record("an open network API must be refused"); return }
        #expect(reasons.contains { $0.hasPrefix("api.keys: at least one key is required") })
        #expect(d.daemon.configuration.api.keys.count == 2)
        #expect(try await HTTPTestClient(port: d.port).post("/v1/devices", "{}").status == 401)
    }
}
