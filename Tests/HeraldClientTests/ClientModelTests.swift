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
        // attempt n: [min(30, 2^n), 1.5 × that].
        for (attempt, base) in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 30.0), (6, 30.0), (40, 30.0), (1000, 30.0)] {
            for r in [0.0, 0.25, 0.5, 0.999_999] {
                let d = p.delay(attempt: attempt, random: r)
                #expect(d >= .seconds(base) && d <= .seconds(base * 1.5), "attempt \(attempt) random \(r): \(d)")
            }
            #expect(p.delay(attempt: attempt, random: 0) == .seconds(base))
            #expect(p.bounds(attempt: attempt) == Duration.seconds(base)...Duration.seconds(base * 1.5))
        }
        // The jitter is what `random` says: 0.5 adds a quarter.
        #expect(p.delay(attempt: 2, random: 0.5) == .seconds(5))
        // The server's retry: is the base, and a floor even past the cap.
        #expect(p.delay(attempt: 0, serverRetry: .milliseconds(2000), random: 0) == .seconds(2))
        #expect(p.delay(attempt: 3, serverRetry: .milliseconds(2000), random: 0) == .seconds(16))
        #expect(p.delay(attempt: 9, serverRetry: .seconds(45), random: 0) == .seconds(45))
        // Retry-After is a floor too.
        #expect(p.delay(attempt: 0, retryAfter: .seconds(7), random: 0) == .seconds(7))
        #expect(p.delay(attempt: 5, retryAfter: .seconds(7), random: 0) == .seconds(30))
        // No jitter: exact.
        #expect(ReconnectPolicy(jitter: 0).delay(attempt: 3, random: 0.9) == .seconds(8))
    }
}
