import Foundation
import HeraldClient
import HeraldTestKit
import Testing

/// The notification model, the state stores, and the backoff's bounds (no network).
@Suite struct ClientModelTests {
    @Test func aNotificationEventDecodesEveryField() throws {
        let json = #"{"id":"01HX","app":"com.example.app","alert":{"title":"T","subtitle":"S","body":"B","loc_key":"K","loc_args":["a"]},"badge":3,"sound":"ping.caf","data":{"k":"v","n":2,"f":1.5,"b":true,"z":null,"l":[1,"x"],"o":{"p":"q"}},"created_at":"2026-12-01T17:10:09.873Z"}"#
        let n = try HeraldNotification.decode(json, eventID: 7)
        #expect(n.id == "01HX")
        #expect(n.app == "com.example.app")
        #expect(n.eventID == 7)
        #expect(n.alert?.title == "T")
        #expect(n.alert?.subtitle == "S")
        #expect(n.alert?.body == "B")
        #expect(n.alert?.locKey == "K")
        #expect(n.alert?.locArgs == ["a"])
        #expect(n.badge == 3)
        #expect(n.sound == .named("ping.caf"))
        #expect(n.data == ["k": .string("v"), "n": .int(2), "f": .double(1.5), "b": .bool(true), "z": .null,
                           "l": .array([.int(1), .string("x")]), "o": .object(["p": .string("q")])])
        let created = try #require(n.createdAt?.timeIntervalSince1970)
        #expect(abs(created - 1_796_145_009.873) < 0.000_5, "\(created)")
        #expect(n.userInfo[HeraldClient.notificationIDKey] as? String == "01HX")
        #expect(n.userInfo["k"] as? String == "v")
        #expect(HeraldClient.notificationIDKey == "herald_id")
    }

    @Test func aStringAlertIsTheBodyAndACriticalSoundIsRead() throws {
        let n = try HeraldNotification.decode(#"{"id":"a","app":"x","alert":"hello","sound":{"critical":true,"name":"alarm.caf","volume":0.8},"created_at":"2026-12-01T17:10:09Z"}"#, eventID: nil)
        #expect(n.alert == HeraldNotification.Alert(body: "hello"))
        #expect(n.sound == .critical(name: "alarm.caf", volume: 0.8))
        #expect(n.createdAt == Date(timeIntervalSince1970: 1_796_145_009))
        #expect(n.data.isEmpty)
        #expect(n.badge == nil)
    }

    @Test func aMalformedEventNamesWhatIsWrong() {
        #expect(throws: HeraldClientError.invalidEvent("event 4: no \"id\" field")) { try HeraldNotification.decode(#"{"app":"x"}"#, eventID: 4) }
        do {
            _ = try HeraldNotification.decode(#"{"id":"a","app":"x","badge":"three"}"#, eventID: 5)
            Issue.record("a string badge was accepted")
        } catch {
            #expect(error.description.contains("badge"), "\(error)")
        }
        #expect(throws: HeraldClientError.self) { try HeraldNotification.decode("not json", eventID: nil) }
    }

    @Test func localizedKeysTakeTheirArgumentsInOrderAndByPosition() {
        typealias A = HeraldNotification.Alert
        #expect(A.localized("%@ sent you %@", ["Ann", "a photo"]) == "Ann sent you a photo")
        #expect(A.localized("%2$@ from %1$@ (100%%)", ["Ann", "a photo"]) == "a photo from Ann (100%)")
        #expect(A.localized("%@ and %@", ["only one"]) == "only one and ")
        var alert = A(title: nil, body: nil)
        alert.titleLocKey = "GREETING %@"
        alert.titleLocArgs = ["Bo"]
        #expect(alert.displayTitle() == "GREETING Bo")
        #expect(A(title: "Plain").displayTitle() == "Plain")
    }

    @Test func theRecentIDsAreBoundedAndSurviveThroughTheStore() async throws {
        let store = InMemoryClientStore()
        let client = HeraldClient(configuration: .init(server: URL(string: "http://127.0.0.1:1")!, app: "a", recentIDLimit: 3),
                                  store: store, tokenProvider: { "t" })
        for id in ["n1", "n2", "n3", "n4"] { #expect(!client.isDuplicate(notificationID: id)) }
        #expect(client.isDuplicate(notificationID: "n4"))
        #expect(client.isDuplicate(remoteNotification: ["herald_id": "n2", "aps": ["alert": "x"]]))
        // n1 was evicted (the bound is 3): new again.
        #expect(store.load().recentNotificationIDs == ["n2", "n3", "n4"])
        #expect(!client.isDuplicate(notificationID: "n1"))
        #expect(store.load().recentNotificationIDs == ["n3", "n4", "n1"])
        // A push without a Herald id is never a duplicate.
        #expect(!client.isDuplicate(remoteNotification: ["aps": ["alert": "x"]]))
        // A new client on the same store remembers.
        let again = HeraldClient(configuration: .init(server: URL(string: "http://127.0.0.1:1")!, app: "a", recentIDLimit: 3),
                                 store: store, tokenProvider: { "t" })
        #expect(again.isDuplicate(remoteNotification: ["herald_id": "n1"]))
        #expect(!again.isDuplicate(remoteNotification: ["herald_id": "n2"]))
    }

    @Test func aCustomPushKeyIsUsed() {
        let client = HeraldClient(configuration: .init(server: URL(string: "http://127.0.0.1:1")!, app: "a", notificationIDKey: "hid"),
                                  store: InMemoryClientStore(), tokenProvider: { "t" })
        #expect(!client.isDuplicate(remoteNotification: ["hid": "x"]))
        #expect(client.isDuplicate(remoteNotification: ["hid": "x"]))
        #expect(!client.isDuplicate(remoteNotification: ["herald_id": "y"]))
    }

    @Test func theFileStoreRoundTripsAndReportsAnUnreadableFile() throws {
        let dir = try TemporaryDirectory(prefix: "herald-client")
        defer { dir.remove() }
        let store = FileClientStore(path: dir.file("state.json"))
        #expect(try store.load() == HeraldClientState())
        let state = HeraldClientState(lastEventID: "42", owner: "alice/00ab", recentNotificationIDs: ["a", "b"])
        try store.save(state)
        #expect(try FileClientStore(path: dir.file("state.json")).load() == state)
        _ = try dir.write("bad.json", "{not json")
        #expect(throws: HeraldClientError.self) { try FileClientStore(path: dir.file("bad.json")).load() }
        #expect(throws: HeraldClientError.self) { try FileClientStore(path: dir.file("missing/dir/state.json")).save(state) }
    }

    @Test func theUserDefaultsStoreRoundTrips() throws {
        let suite = "herald.client.tests.\(UUID().uuidString)"
        let defaults = try #require(UserDefaults(suiteName: suite))
        defer { defaults.removePersistentDomain(forName: suite) }
        let store = UserDefaultsClientStore(defaults: defaults, app: "com.example.app")
        #expect(store.key == "herald.client.com.example.app")
        #expect(try store.load() == HeraldClientState())
        let state = HeraldClientState(lastEventID: "9", owner: nil, recentNotificationIDs: ["x"])
        try store.save(state)
        #expect(try UserDefaultsClientStore(defaults: defaults, app: "com.example.app").load() == state)
    }

    @Test func backoffGrowsExponentiallyWithinItsBoundsAndHonoursTheServer() {
        let p = ReconnectPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(30), multiplier: 2, jitter: 0.5)
        // attempt n: [half, all] of the window min(30, 2^n).
        for (attempt, window) in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 30.0), (6, 30.0), (40, 30.0), (1000, 30.0)] {
            for r in [0.0, 0.25, 0.5, 0.999_999] {
                let d = p.delay(attempt: attempt, random: r)
                #expect(d >= .seconds(window / 2) && d <= .seconds(window), "attempt \(attempt) random \(r): \(d)")
            }
            #expect(p.window(attempt: attempt) == .seconds(window))
            #expect(p.delay(attempt: attempt, random: 1) == .seconds(window))
            #expect(p.bounds(attempt: attempt) == Duration.seconds(window / 2)...Duration.seconds(window))
        }
        // The jitter is what `random` says: 0.5 of half the window.
        #expect(p.delay(attempt: 2, random: 0.5) == .seconds(3))
        // The server's retry: is the window's base, and raises the cap past it.
        #expect(p.delay(attempt: 0, serverRetry: .milliseconds(2000), random: 1) == .seconds(2))
        #expect(p.delay(attempt: 3, serverRetry: .milliseconds(2000), random: 1) == .seconds(16))
        #expect(p.delay(attempt: 9, serverRetry: .seconds(45), random: 1) == .seconds(45))
        // Retry-After is waited in full, then the jittered window.
        #expect(p.delay(attempt: 0, retryAfter: .seconds(7), random: 0) == .seconds(7.5))
        #expect(p.delay(attempt: 5, retryAfter: .seconds(7), random: 1) == .seconds(37))
        #expect(p.bounds(attempt: 0, retryAfter: .seconds(7)) == Duration.seconds(7.5)...Duration.seconds(8))
        // No jitter: exactly the window.
        #expect(ReconnectPolicy(jitter: 0).delay(attempt: 3, random: 0.9) == .seconds(8))
    }

    /// Issue 37: the default is full jitter across the server's `retry:`, so a fleet dropped in
    /// one instant (a deploy) comes back spread over the whole window, not in one instant at its
    /// end; refused with `Retry-After`, it comes back spread over the window after it.
    @Test func aFleetSpreadsItsReconnectsAcrossRetryAndAfterRetryAfter() {
        let p = ReconnectPolicy()
        #expect(p.jitter == 1)
        #expect(p.bounds(attempt: 0, serverRetry: .seconds(2)) == Duration.zero...Duration.seconds(2))
        var generator = SystemRandomNumberGenerator()
        let fleet = (0..<10_000).map { _ in p.delay(attempt: 0, serverRetry: .seconds(2), random: Double.random(in: 0..<1, using: &generator)) }
        // Ten 200 ms slots of the window: each holds about a tenth of the fleet (1,000 ± 20 %).
        var slots = [Int](repeating: 0, count: 10)
        for d in fleet { slots[min(9, Int((Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18) / 0.2))] += 1 }
        #expect(slots.allSatisfy { $0 > 800 && $0 < 1_200 }, "\(slots)")
        #expect(fleet.allSatisfy { $0 >= .zero && $0 <= .seconds(2) })
        // Refused with Retry-After: 5: none before 5 s, and spread over the next 2 s.
        let refused = (0..<10_000).map { _ in p.delay(attempt: 0, serverRetry: .seconds(2), retryAfter: .seconds(5), random: Double.random(in: 0..<1, using: &generator)) }
        #expect(refused.allSatisfy { $0 >= .seconds(5) && $0 <= .seconds(7) })
        #expect(refused.filter { $0 < .seconds(6) }.count > 4_000 && refused.filter { $0 < .seconds(6) }.count < 6_000)
    }
}
