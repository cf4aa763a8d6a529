import Foundation
import HeraldCore
import HeraldServer
import HeraldTestKit
import Testing

/// The browser demo page (`GET /demo`) in a real headless Chromium (``Browser``), against a real
/// daemon on 127.0.0.1.
@Suite(.serialized, .stopsDaemons) struct DemoPageTests {
    static let app = TestDaemon.app

    /// An in-process daemon with `api.demo` set to `demo`.
    static func daemon(demo: Bool = true) async throws -> TestDaemon {
        let config = TestDaemon.configJSON().replacingOccurrences(of: #""listen": "127.0.0.1:0""#,
                                                                   with: #""listen": "127.0.0.1:0", "demo": \#(demo)"#)
        return try await TestDaemon.start(config: config)
    }

    @Test(.timeLimit(.minutes(1))) func browserLeavesNoProcessOrFolderBehind() async throws {
        let browser = try await Browser.start()
        let folder = browser.folder
        // chromedriver and Chromium (its helpers name the profile folder on their command lines).
        #expect(Browser.processes(naming: folder).count >= 2)
        await browser.close()
        #expect(Browser.processes(naming: folder).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: folder))
    }

    @Test func pageIsServedOnlyWhenTheConfigAsksForIt() async throws {
        let on = try await Self.daemon(demo: true)
        let page = try await HTTPTestClient(port: on.port).get("/demo")
        #expect(page.status == 200)
        #expect(page.headers["content-type"] == "text/html; charset=utf-8")
        #expect(page.headers["cache-control"] == "no-store")
        // The CSP allows this response's inline script and style by their nonce, and nothing from elsewhere.
        let csp = try #require(page.headers["content-security-policy"])
        let nonce = try #require(csp.firstMatch(of: /script-src 'nonce-([a-z0-9]+)'/)?.1)
        #expect(csp.hasPrefix("default-src 'none'"))
        #expect(csp.contains("connect-src 'self'"))
        #expect(page.text.contains(#"<script nonce="\#(nonce)">"#))
        #expect(page.text.contains(#"<style nonce="\#(nonce)">"#))
        #expect(!page.text.contains("NONCE"))
        let again = try await HTTPTestClient(port: on.port).get("/demo")
        #expect(again.headers["content-security-policy"] != csp, "the nonce is not fresh per response")
        #expect(try await HTTPTestClient(port: on.port).post("/demo", "{}").status == 405)
        #expect(csp.contains("worker-src 'self'"))
        // The service worker: JavaScript, allowed to control /demo (one level above its folder).
        let worker = try await HTTPTestClient(port: on.port).get("/demo/sw.js")
        #expect(worker.status == 200)
        #expect(worker.headers["content-type"] == "text/javascript; charset=utf-8")
        #expect(worker.headers["service-worker-allowed"] == "/demo")
        #expect(worker.text.contains(#"addEventListener("push""#))

        let off = try await Self.daemon(demo: false)
        let refused = try await HTTPTestClient(port: off.port).get("/demo")
        #expect(refused.status == 404)
        #expect(refused.errorCode == "not_found")
        #expect(refused.json?["error"]?["message"]?.stringValue?.contains(#""demo": true"#) == true)
        #expect(try await HTTPTestClient(port: off.port).get("/demo/sw.js").status == 404)
    }

    /// One browser for both (a browser start costs seconds): the page without a token, then its toasts.
    @Test(.timeLimit(.minutes(1))) func pageWithoutATokenSaysHowToOpenItAndShowsToastsAsTextAndWebNotifications() async throws {
        let daemon = try await Self.daemon()
        try await Browser.with { browser in
            try await browser.open("http://127.0.0.1:\(daemon.port)/demo")
            // The inline script ran under the page's CSP: it changed the state from "connecting".
            try await browser.waitForElement(css: #"#state[data-state="closed"]"#, containing: "/demo#app=APP&token=CLIENT_TOKEN")
            #expect(try await browser.texts(css: ".toast").isEmpty)
            #expect(try await browser.texts(css: "#app") == ["-"])

            try await browser.waitForElement(css: "#permission", containing: "default")
            try await browser.waitForElement(css: "#ask")  // the Allow button shows while permission is undecided
            try await browser.setPermission("notifications", "granted")
            // Record what the page hands to the Web Notification constructor.
            try await browser.evaluate("""
                const Real = window.Notification;
                window.shown = [];
                window.Notification = function (title, options) { window.shown.push([title, options.body, options.tag]); return new Real(title, options); };
                Object.defineProperty(window.Notification, "permission", { get: () => Real.permission });
                """)
            let title = #"<img src=x id=injected> & "quotes""#
            try await browser.evaluate("toast(arguments[0])", [[
                "id": "n-1", "app": .string(Self.app), "alert": ["title": .string(title), "body": "Your order shipped"],
                "data": [:], "created_at": "2026-12-01T00:00:00Z",
            ]])
            let text = try await browser.waitForElement(css: #".toast[data-id="n-1"]"#, containing: "Your order shipped")
            #expect(text == "\(title)\nYour order shipped")
            #expect(try await browser.evaluate("return document.querySelectorAll('#toasts img, #injected').length") == 0)
            #expect(try await browser.evaluate("return window.shown") == [[.string(title), "Your order shipped", "n-1"]])
            // A plain-string alert is the body.
            try await browser.evaluate(#"toast({id: "n-2", app: arguments[0], alert: "Plain text"})"#, [.string(Self.app)])
            #expect(try await browser.waitForElement(css: #".toast[data-id="n-2"]"#) == "\(Self.app)\nPlain text")
            #expect(try await browser.texts(css: ".toast").count == 2)
        }
    }

    /// The whole path: a forged token refused with the daemon's reason on the page; then a client
    /// token from the API, the page live on `/v1/stream`, a notification sent through
    /// `POST /v1/notifications`, its toast in the DOM, acknowledged by the page (`ack=1`, `POST
    /// /v1/stream/ack`) and `delivered` on that ack. `herald serve` as a child process with the
    /// registered plugins (the `local` transport) and an app that uses `local-first`.
    @Test(.timeLimit(.minutes(1)))
    func aForgedTokenIsExplainedAndANotificationSentThroughTheAPIAppearsAsAToast() async throws {
        let key = "demo-test-key-0123456789abcdef"
        let dir = try TemporaryDirectory(prefix: "herald-demo")
        defer { dir.remove() }
        try dir.write("config.json", """
            {
              "storage": {"path": "herald.db"},
              "apps": {"\(Self.app)": {"routes": ["local"], "foreground": "local-first",
                                       "clientSecret": "demo-client-secret-0123456789abcdef0123"}},
              "transports": {"local": {"type": "local"}},
              "api": {"listen": "127.0.0.1:0", "demo": true,
                      "keys": [{"id": "backend", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
              "server": {"batchLinger": 0},
              "log": {"level": "info"}
            }
            """)
        let child = try ChildProcess.herald(["serve", "--config", dir.file("config.json")], environment: ["HERALD_API_KEY": key],
                                            directory: dir.path)
        defer { child.terminate() }
        guard let port = await child.listeningPort(timeout: 30) else { Issue.record("herald serve did not start: \(child.stderr)"); return }
        let api = HTTPTestClient(port: port, key: key)
        let device = "0123456789abcdef0123456789abcdef"  // an installation id: this browser has no push route
        let minted = try await api.post("/v1/client-tokens", #"{"app":"\#(Self.app)","user":"alice","device":"\#(device)","ttl":3600}"#)
        #expect(minted.status == 201, "\(minted)")
        let token = try #require(minted.json?["token"]?.stringValue)

        // What the daemon answers a forged token; the page must show the same error.
        let forged = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.c2lnbmF0dXJl"
        let refusal = try await HTTPTestClient(port: port).get("/v1/stream?app=\(Self.app)&access_token=\(forged)")
        #expect(refusal.status == 401)
        #expect(refusal.errorCode == "invalid_client_token")
        let reason = try #require(refusal.json?["error"]?["message"]?.stringValue)

        try await Browser.with { browser in
            try await browser.open("http://127.0.0.1:\(port)/demo#app=\(Self.app)&token=\(forged)")
            let state = try await browser.waitForElement(css: #"#state[data-state="closed"]"#, containing: "invalid_client_token")
            #expect(state == "closed: invalid_client_token: \(reason)")
            #expect(try await browser.texts(css: "#app") == [Self.app])

            try await browser.open("http://127.0.0.1:\(port)/demo#app=\(Self.app)&token=\(token)")
            try await browser.waitForElement(css: #"#state[data-state="live"]"#)
            // "live" comes with the response head; the device counts as present once the hub has
            // attached the stream, which the daemon's gauge shows.
            #expect(await eventually(timeout: 10) {
                (try? await api.get("/metrics"))?.text.split(separator: "\n").contains("herald_streams_open 1") ?? false
            })
            let sent = try await api.post("/v1/notifications", #"""
                {"app":"\#(Self.app)","users":["alice"],"alert":{"title":"Herald","body":"Your order shipped"}}
                """#)
            #expect(sent.status == 202, "\(sent)")
            #expect(sent.json?["deliveries"]?.intValue == 1, "the browser was not planned: \(sent)")
            let id = try #require(sent.json?["id"]?.stringValue)
            let toast = try await browser.waitForElement(css: ".toast[data-id=\"\(id)\"]", containing: "Your order shipped")
            #expect(toast == "Herald\nYour order shipped")
            let event = try #require(try await browser.texts(css: "#last-event-id").first.flatMap { Int($0) }, "no event id shown")
            #expect(try await browser.texts(css: "#state") == ["live"])
            // The page opened its stream with ack=1 and acknowledged the event: the daemon took the
            // ack (the page shows the 204) and recorded the delivery delivered on that evidence.
            try await browser.waitForElement(css: "#acked", containing: String(event))
            var status: JSONValue = .null
            #expect(await eventually(timeout: 10) {
                status = (try? await api.get("/v1/notifications/\(id)"))?.json ?? .null
                return status["deliveries"]?.arrayValue?.first?["state"]?.stringValue == "delivered"
            }, "\(status)")
            let delivery = status["deliveries"]?.arrayValue?.first
            #expect(delivery?["transport"]?.stringValue == "local")
            #expect(delivery?["token"]?.stringValue == device)
            #expect(delivery?["reason"]?.stringValue == "acknowledged by the device as event \(event)", "\(status)")
            #expect(await eventually(timeout: 10) {
                (try? await api.get("/metrics"))?.text.split(separator: "\n").contains("herald_stream_acks_total 1") ?? false
            })
        }
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
    }

    /// The page registers its service worker (scope `/demo`), offers the Web Push button for an
    /// app with a `webpush` route, and shows toasts from the stream; its worker shows a Web Push
    /// as a notification, and drops one whose id the page already showed from the stream.
    ///
    /// Headless Chromium cannot reach a browser push service here, so `PushManager.subscribe` is
    /// not called: the push half uses a simulator subscription, and the message the simulator
    /// decrypted is handed to the page's worker through DevTools (`ServiceWorker.deliverPushMessage`),
    /// as a push service would deliver it. (`BrowserLocalFirstTests` covers the tab closing.)
    @Test(.timeLimit(.minutes(2)))
    func thePageRegistersItsServiceWorkerShowsToastsAndItsWorkerShowsWebPushesThePageDidNotShow() async throws {
        let certs = try TestCertificates.shared()
        let sim = try BrowserLocalFirstTests.simulator()
        defer { sim.stop() }
        let d = try await BrowserLocalFirstTests.start(sim: sim, certs: certs, demo: true)
        let app = BrowserLocalFirstTests.app, device = "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"
        let token = BrowserLocalFirstTests.token(user: "dana", device: device)
        let origin = "http://127.0.0.1:\(d.port)"
        try await Browser.with { browser in
            try await browser.open("\(origin)/demo#app=\(app)&token=\(token)")
            try await browser.setPermission("notifications", "granted")
            try await browser.waitForElement(css: #"#state[data-state="live"]"#)
            try await browser.waitForElement(css: "#worker[data-scope]")
            #expect(try await browser.evaluateAsync("return (await navigator.serviceWorker.ready).scope") == .string("\(origin)/demo"))
            #expect(try await browser.texts(css: "#worker") == ["ready (\(origin)/demo)"])
            // The app has a webpush route: its public key answered, the button is offered.
            try await browser.waitForElement(css: "#subscribe:not([hidden])", containing: "Also notify me when this tab is closed")

            // A toast from the stream.
            #expect(await eventually(timeout: 10) { BrowserLocalFirstTests.presence(d, user: "dana") == [device] })
            let shown = try await BrowserLocalFirstTests.send(d, to: "dana", "from the stream")
            try await browser.waitForElement(css: ".toast[data-id=\"\(shown)\"]", containing: "from the stream")

            // A Web Push as the daemon sends it, decrypted by the simulator (a subscription of
            // another user: this tab stays open).
            let r = try await d.client.post("/v1/devices", #"{"app":"\#(app)","user":"erin","subscription":\#(sim.subscriptionJSON(0))}"#)
            #expect(r.status == 201, "\(r.text)")
            let pushed = try await BrowserLocalFirstTests.send(d, to: "erin", "while closed")
            #expect(await eventually(timeout: 20) { BrowserLocalFirstTests.pushes(sim, 0).count == 1 })
            let message = try #require(sim.rules.received.first { $0.subscription == 0 })
            #expect(message.json?["id"]?.stringValue == pushed, "\(String(decoding: message.plaintext, as: UTF8.self))")

            // The page's worker gets a duplicate of the toast's notification (dropped), then the
            // Web Push (shown). DevTools names the registration by an id the page cannot see: the
            // profile is new, so it is among the first few (a push to an id with no registration
            // goes nowhere).
            let duplicate = #"{"id":"\#(shown)","app":"\#(app)","title":"Herald","body":"from the stream","data":{},"created_at":"2026-12-03T00:00:00Z"}"#
            try await browser.devTools("ServiceWorker.enable")
            for data in [duplicate, String(decoding: message.plaintext, as: UTF8.self)] {
                for registration in 0..<4 {
                    try await browser.devTools("ServiceWorker.deliverPushMessage",
                                               ["origin": .string(origin), "registrationId": .string(String(registration)), "data": .string(data)])
                }
            }
            // The worker records an id once its notification is shown.
            #expect(await eventually(timeout: 10) {
                (try? await browser.evaluateAsync("return !!(await (await caches.open('herald-demo-shown')).match('/demo/shown/' + arguments[0]))",
                                                  [.string(pushed)])) == .bool(true)
            }, "the worker did not show the Web Push")
            let notifications = try await browser.evaluateAsync("""
                const r = await navigator.serviceWorker.ready;
                return (await r.getNotifications()).map((n) => [n.title, n.body, n.tag, n.data.id]);
                """)
            #expect(notifications == [["Herald", "while closed", .string(pushed), .string(pushed)]], "\(notifications)")
        }
    }
}
