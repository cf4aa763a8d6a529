import Foundation
import HeraldAPNs
import HeraldCore
import HeraldMatrix
import HeraldLogTransport
import HeraldTestKit
import Testing

/// The Matrix notify body, pushkeys, Sygnal's payload mapping (every branch) and the `matrix`
/// config section.
@Suite struct MatrixPayloadTests {
    static let specExample = MatrixFixtures.specExample

    static func notification(_ json: String) throws -> MatrixNotification {
        try MatrixNotification.parse(JSONValue.parse(json))
    }

    static func payload(_ decision: MatrixPayload.Decision) -> String? {
        guard case .send(let content, _, _) = decision else { return nil }
        return String(decoding: APNsPayload.encode(content), as: UTF8.self)
    }

    static let device = MatrixDevice(appID: "a", pushkey: "00ff", tweaks: ["sound": "bing"])

    static func message(_ content: [String: JSONValue]?, room: String? = "Mission Control", alias: String? = nil,
                        type: String = "m.room.message") -> MatrixNotification {
        MatrixNotification(eventID: "$e", roomID: "!r:x", type: type, sender: "@tom:x", senderDisplayName: "Major Tom",
                           roomName: room, roomAlias: alias, content: content, unread: 2, devices: [device])
    }

    // MARK: The notify body

    @Test func specExampleParses() throws {
        let n = try Self.notification(Self.specExample)
        #expect(n.eventID == "$3957tyerfgewrf384" && n.type == "m.room.message" && n.priority == .high)
        #expect(n.unread == 2 && n.missedCalls == 1 && n.roomName == "Mission Control")
        #expect(n.devices == [MatrixDevice(appID: "org.matrix.matrixConsole.ios", pushkey: "V2h5IG9uIGVhcnRoIGRpZCB5b3UgZGVjb2RlIHRoaXM/",
                                           pushkeyTS: 12345678, data: [:], tweaks: ["sound": "bing"])])
        #expect(Self.payload(MatrixPayload.map(n, device: n.devices[0]))
                == #"{"aps":{"alert":{"loc-key":"MSG_FROM_USER_IN_ROOM_WITH_CONTENT","loc-args":["Major Tom","Mission Control","I'm floating in a most peculiar way."]},"badge":3,"sound":"bing"},"event_id":"$3957tyerfgewrf384","room_id":"!slw48wfj34rtnrf:example.com"}"#)
    }

    @Test func malformedBodiesNameTheField() {
        func issues(_ json: String) -> [String] {
            do { _ = try Self.notification(json); return [] } catch { return (error as? RequestIssues)?.issues.map(\.description) ?? ["\(error)"] }
        }
        #expect(issues("[]") == [#"expected a JSON object with "notification", found an array"#])
        #expect(issues("{}") == ["notification: is required"])
        #expect(issues(#"{"notification": {}}"#) == ["notification.devices: is required"])
        #expect(issues(#"{"notification": {"devices": []}}"#) == ["notification.devices: must list at least one device"])
        #expect(issues(#"{"notification": {"devices": [{"app_id": "a"}]}}"#) == ["notification.devices[0].pushkey: is required"])
        #expect(issues(#"{"notification": {"prio": "urgent", "devices": [{"app_id": 1, "pushkey": "k", "pushkey_ts": "x"}]}}"#)
                == [#"notification.prio: expected "high" or "low", found "urgent""#, "notification.devices[0].app_id: expected a string, found a number",
                    "notification.devices[0].pushkey_ts: expected a whole number, found a string"])
        #expect(issues(#"{"notification": {"counts": {"unread": -1}, "devices": [{"app_id": "a", "pushkey": "k"}]}}"#)
                == ["notification.counts.unread: must be between 0 and 2147483647, found -1"])
        // Unknown fields and nulls are fine: homeservers add their own.
        #expect(issues(#"{"notification": {"id": "$x", "room_name": null, "devices": [{"app_id": "a", "pushkey": "k", "data": null}]}}"#) == [])
    }

    // MARK: Pushkeys

    @Test func pushkeysInHexAndBase64BecomeHex() throws {
        let hex = "5c0a6d6e5b7bd5b0d3b1bff3e4b2d0e07e3ef1b4e02ed23a1d2c0a5b8a9f0e11"
        let bytes = DeviceToken.bytes(ofHex: hex)
        let standard = Data(bytes).base64EncodedString()
        #expect(standard.hasSuffix("="))
        #expect(try MatrixPushkey.hexToken(standard) == hex)
        #expect(try MatrixPushkey.hexToken(String(standard.dropLast())) == hex)   // unpadded
        let urlSafe = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        #expect(try MatrixPushkey.hexToken(urlSafe) == hex)
        #expect(try MatrixPushkey.hexToken(hex.uppercased()) == hex)
        #expect(try MatrixPushkey.hexToken("V2h5IG9uIGVhcnRoIGRpZCB5b3UgZGVjb2RlIHRoaXM/") == DeviceToken.hex(Array("Why on earth did you decode this?".utf8)))
        #expect(throws: DeviceToken.Problem.self) { try MatrixPushkey.hexToken("not a token!") }
        #expect(throws: DeviceToken.Problem.self) { try MatrixPushkey.hexToken("QQ==") }      // one byte: too short
        #expect(throws: DeviceToken.Problem.self) { try MatrixPushkey.hexToken("QUJD=RA") }   // data after padding
    }

    // MARK: Every branch of the mapping

    @Test func messagesInANamedRoom() {
        #expect(Self.payload(MatrixPayload.map(Self.message(["msgtype": "m.text", "body": "hi"]), device: Self.device))
                == #"{"aps":{"alert":{"loc-key":"MSG_FROM_USER_IN_ROOM_WITH_CONTENT","loc-args":["Major Tom","Mission Control","hi"]},"badge":2,"sound":"bing"},"event_id":"$e","room_id":"!r:x"}"#)
        #expect(MatrixPayload.locKey(for: Self.message(["msgtype": "m.notice", "body": "n"]))! == ("MSG_FROM_USER_IN_ROOM_WITH_CONTENT", ["Major Tom", "Mission Control", "n"]))
        #expect(MatrixPayload.locKey(for: Self.message(["msgtype": "m.image", "body": "cat.jpg"]))! == ("IMAGE_FROM_USER_IN_ROOM", ["Major Tom", "cat.jpg", "Mission Control"]))
        #expect(MatrixPayload.locKey(for: Self.message(["msgtype": "m.emote", "body": "waves"]))! == ("ACTION_FROM_USER_IN_ROOM", ["Mission Control", "Major Tom", "waves"]))
        #expect(MatrixPayload.locKey(for: Self.message(nil))! == ("MSG_FROM_USER_IN_ROOM", ["Major Tom", "Mission Control"]))
        // The alias stands in for a missing name; encrypted events carry no readable content.
        #expect(MatrixPayload.locKey(for: Self.message(nil, room: nil, alias: "#a:x", type: "m.room.encrypted"))! == ("MSG_FROM_USER_IN_ROOM", ["Major Tom", "#a:x"]))
    }

    @Test func messagesWithoutARoomName() {
        func key(_ c: [String: JSONValue]?) -> (String, [String]) { MatrixPayload.locKey(for: Self.message(c, room: nil))! }
        #expect(key(["msgtype": "m.text", "body": "hi"]) == ("MSG_FROM_USER_WITH_CONTENT", ["Major Tom", "hi"]))
        #expect(key(["msgtype": "m.image", "body": "cat.jpg"]) == ("IMAGE_FROM_USER", ["Major Tom", "cat.jpg"]))
        #expect(key(["msgtype": "m.emote", "body": "waves"]) == ("ACTION_FROM_USER", ["Major Tom", "waves"]))
        #expect(key(["msgtype": "m.text"]) == ("MSG_FROM_USER", ["Major Tom"]))   // no body: no content shown
        var n = Self.message(nil, room: nil)
        n.senderDisplayName = nil
        #expect(MatrixPayload.locKey(for: n)! == ("MSG_FROM_USER", ["@tom:x"]))
        n.sender = nil
        #expect(MatrixPayload.locKey(for: n)! == ("MSG_FROM_USER", [" "]))
    }

    @Test func callsInvitesAndOtherEvents() {
        let voice = Self.message(["offer": ["sdp": "v=0\r\nm=audio 9"]], type: "m.call.invite")
        #expect(MatrixPayload.locKey(for: voice)! == ("VOICE_CALL_FROM_USER", ["Major Tom"]))
        let video = Self.message(["offer": ["sdp": "v=0\r\nm=audio 9\r\nm=video 9"]], type: "m.call.invite")
        #expect(MatrixPayload.locKey(for: video)! == ("VIDEO_CALL_FROM_USER", ["Major Tom"]))

        var invite = Self.message(["membership": "invite"], type: "m.room.member")
        invite.userIsTarget = true
        invite.membership = "invite"
        #expect(MatrixPayload.locKey(for: invite)! == ("USER_INVITE_TO_NAMED_ROOM", ["Major Tom", "Mission Control"]))
        invite.roomName = nil
        invite.roomAlias = "#a:x"
        #expect(MatrixPayload.locKey(for: invite)! == ("USER_INVITE_TO_NAMED_ROOM", ["Major Tom", "#a:x"]))
        invite.roomAlias = nil
        #expect(MatrixPayload.locKey(for: invite)! == ("USER_INVITE_TO_CHAT", ["Major Tom"]))
        // A member event that is not the recipient's invitation alerts nobody: only the badge goes.
        invite.userIsTarget = false
        #expect(MatrixPayload.locKey(for: invite) == nil)
        #expect(Self.payload(MatrixPayload.map(invite, device: Self.device)) == #"{"aps":{"badge":2}}"#)
        invite.unread = nil
        #expect(MatrixPayload.map(invite, device: Self.device) == .nothing)

        #expect(MatrixPayload.locKey(for: Self.message(nil, type: "m.sticker"))! == ("MSG_FROM_USER", ["Major Tom"]))
    }

    @Test func badgeOnlyIsUnreadPlusMissedCallsWithoutDefaultPayload() {
        let n = MatrixNotification(unread: 4, missedCalls: 1, devices: [Self.device])
        let device = MatrixDevice(appID: "a", pushkey: "00ff", data: ["default_payload": ["aps": ["mutable-content": 1]]])
        let decision = MatrixPayload.map(n, device: device, defaultPayload: ["aps": ["category": "c"]])
        #expect(Self.payload(decision) == #"{"aps":{"badge":5}}"#)
        guard case .send(_, let mode, _) = decision else { Issue.record("not sent"); return }
        #expect(mode == .badgeOnly)
        #expect(MatrixPayload.map(MatrixNotification(devices: [Self.device]), device: Self.device) == .nothing)
    }

    @Test func eventIDOnlySendsIdsCountsAndTheDefaultPayload() {
        // Synapse leaves out type and the rest for "format": "event_id_only" pushers.
        let n = MatrixNotification(eventID: "$e", roomID: "!r:x", unread: 3, missedCalls: 1, devices: [Self.device])
        let device = MatrixDevice(appID: "a", pushkey: "00ff",
                                  data: ["format": "event_id_only",
                                         "default_payload": ["aps": ["mutable-content": 1, "alert": ["loc-key": "Notification", "loc-args": []]]]],
                                  tweaks: ["sound": "bing"])
        let decision = MatrixPayload.map(n, device: device)
        #expect(Self.payload(decision)
                == #"{"aps":{"alert":{"loc-key":"Notification","loc-args":[]},"mutable-content":1},"event_id":"$e","missed_calls":1,"room_id":"!r:x","unread_count":3}"#)
        guard case .send(_, let mode, _) = decision else { Issue.record("not sent"); return }
        #expect(mode == .eventIDOnly)
        // The pusher's format wins even when the homeserver sent everything.
        #expect(Self.payload(MatrixPayload.map(Self.message(["msgtype": "m.text", "body": "secret"]), device: device))
                == #"{"aps":{"alert":{"loc-key":"Notification","loc-args":[]},"mutable-content":1},"event_id":"$e","room_id":"!r:x","unread_count":2}"#)
        // Without a default payload: ids and counts only.
        #expect(Self.payload(MatrixPayload.map(n, device: Self.device)) == #"{"aps":{},"event_id":"$e","missed_calls":1,"room_id":"!r:x","unread_count":3}"#)
    }

    @Test func defaultPayloadsMergeKeyByKey() {
        let device = MatrixDevice(appID: "a", pushkey: "00ff", data: ["default_payload": ["aps": ["category": "pusher", "thread-id": "t"], "x": 2]])
        let configured: [String: JSONValue] = ["aps": ["category": "config", "mutable-content": 1, "sound": "ding"], "x": 1, "y": true]
        #expect(Self.payload(MatrixPayload.map(Self.message(nil), device: device, defaultPayload: configured))
                == #"{"aps":{"alert":{"loc-key":"MSG_FROM_USER_IN_ROOM","loc-args":["Major Tom","Mission Control"]},"badge":2,"sound":"ding","thread-id":"t","category":"pusher","mutable-content":1},"event_id":"$e","room_id":"!r:x","x":2,"y":true}"#)
        // The default alert's other keys stay beside loc-key and loc-args.
        let titled = MatrixDevice(appID: "a", pushkey: "00ff", data: ["default_payload": ["aps": ["alert": ["title": "New message", "loc-key": "X"]]]])
        #expect(Self.payload(MatrixPayload.map(Self.message(nil), device: titled))
                == #"{"aps":{"alert":{"title":"New message","loc-key":"MSG_FROM_USER_IN_ROOM","loc-args":["Major Tom","Mission Control"]},"badge":2},"event_id":"$e","room_id":"!r:x"}"#)
    }

    @Test func aDefaultPayloadThatIsNoObjectRejectsThePushkey() {
        let device = MatrixDevice(appID: "a", pushkey: "00ff", data: ["default_payload": "oops"])
        guard case .reject(let reason) = MatrixPayload.map(Self.message(nil), device: device) else { Issue.record("not rejected"); return }
        #expect(reason.contains("default_payload"))
    }

    @Test func unsendableDefaultPayloadKeysAreDroppedAndNamed() {
        let device = MatrixDevice(appID: "a", pushkey: "00ff",
                                  data: ["default_payload": ["aps": ["url-args": ["x"], "badge": "many", "mutable-content": 1, "alert": ["action-loc-key": "V"]]]])
        guard case .send(let content, _, let dropped) = MatrixPayload.map(Self.message(nil), device: device) else { Issue.record("not sent"); return }
        #expect(dropped == ["aps.alert.action-loc-key", "aps.badge", "aps.url-args"])
        #expect(content.apns.mutableContent && content.badge == 2)
        // herald_id is Herald's (the notification id in every APNs payload): a pusher's is left out.
        let claiming = MatrixDevice(appID: "a", pushkey: "00ff", data: ["default_payload": ["herald_id": "x", "k": 1]])
        guard case .send(let c2, _, let dropped2) = MatrixPayload.map(Self.message(nil), device: claiming) else { Issue.record("not sent"); return }
        #expect(dropped2 == ["herald_id"])
        #expect(c2.data["herald_id"] == nil && c2.data["k"] == 1)
        #expect(APSConversion.convert(["herald_id": "x"]).dropped == ["herald_id"])
    }

    @Test func lowPriorityIsFive() {
        var n = Self.message(nil)
        n.priority = .low
        guard case .send(let content, _, _) = MatrixPayload.map(n, device: Self.device) else { Issue.record("not sent"); return }
        #expect(content.apnsPriority == 5)
        guard case .send(let high, _, _) = MatrixPayload.map(Self.message(nil), device: Self.device) else { Issue.record("not sent"); return }
        #expect(high.apnsPriority == 10)
    }

    @Test func namesAreCutTo1024Characters() {
        let long = String(repeating: "é", count: 2000)
        var n = Self.message(nil)
        n.senderDisplayName = long
        n.roomName = long
        let (_, args) = MatrixPayload.locKey(for: n)!
        #expect(args.map { $0.unicodeScalars.count } == [1024, 1024])
    }

    @Test func longBodiesAreShortenedToApplesLimit() throws {
        let body = String(repeating: "ab\"", count: 3000)   // escapes make the JSON longer than the text
        let decision = MatrixPayload.map(Self.message(["msgtype": "m.text", "body": .string(body)]), device: Self.device)
        guard case .send(let content, _, _) = decision, case .fields(let alert)? = content.alert else { Issue.record("not sent"); return }
        // Sized as the route renders it: with the herald_id of a real notification id.
        let size = APNsPayload.encode(content, notificationID: UUIDSource.timeOrdered().lowercasedString).count
        #expect(size <= 4096 && size > 4080)
        #expect(MatrixPayload.encodedSize(content) == size)
        #expect(APNsPayload.encode(content).count + ",\"herald_id\":\"\"".utf8.count + 36 == size)
        #expect(alert.locArgs?[0] == "Major Tom" && alert.locArgs?[1] == "Mission Control")
        #expect(body.hasPrefix(alert.locArgs![2]) && alert.locArgs![2].count < body.count)
        // The longest text loses first: two long texts end up the same length.
        var both = Self.message(["msgtype": "m.text", "body": .string(String(repeating: "b", count: 5000))])
        both.roomName = String(repeating: "r", count: 1000)
        guard case .send(let c2, _, _) = MatrixPayload.map(both, device: Self.device), case .fields(let a2)? = c2.alert else { Issue.record("not sent"); return }
        #expect(MatrixPayload.encodedSize(c2) <= 4096)
        #expect(a2.locArgs![1].count == 1000 && a2.locArgs![2].count > 1000)
        // Content stored in the queue reads back the same.
        #expect(try NotificationContent.fromAPIJSON(c2.apiJSON) == c2)
    }

    @Test func aPayloadThatCannotShrinkIsTooLarge() {
        let device = MatrixDevice(appID: "a", pushkey: "00ff", data: ["default_payload": ["blob": .string(String(repeating: "x", count: 5000))]])
        guard case .tooLarge(let bytes) = MatrixPayload.map(Self.message(nil), device: device) else { Issue.record("not too large"); return }
        #expect(bytes > 5000)
    }

    // MARK: Configuration


    static let baseConfig = """
      "apps": {"com.example.app": {"routes": ["dry"]}},
      "transports": {"dry": {"type": "log", "path": "d.jsonl"}}
    """

    @Test func matrixSectionIsReadWithDefaults() throws {
        let c = try parse("{\(Self.baseConfig), \"matrix\": {\"apps\": {\"im.vector.app.ios.prod\": {\"app\": \"com.example.app\", \"environment\": \"sandbox\", \"defaultPayload\": {\"aps\": {\"mutable-content\": 1}}}}}}")
        let m = try #require(c.section(MatrixConfiguration.self))
        #expect(m.listen == nil && m.maxBodyBytes == 128 << 10 && m.maxRequestsPerSecond == 1000)
        #expect(m.apps["im.vector.app.ios.prod"] == MatrixConfiguration.App(appID: "im.vector.app.ios.prod", app: "com.example.app",
                                                                           environment: "sandbox", defaultPayload: ["aps": ["mutable-content": 1]]))
        #expect(c.warnings.isEmpty)
        #expect(try parse("{\(Self.baseConfig)}").section(MatrixConfiguration.self) == nil)
        #expect(try parse("{\(Self.baseConfig), \"matrix\": {\"listen\": \"127.0.0.1:8090\", \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}").section(MatrixConfiguration.self)?.listen
                == ListenAddress(host: "127.0.0.1", port: 8090))
    }

    @Test func matrixSectionErrorsNameTheirPath() {
        #expect(errors("{\(Self.baseConfig), \"matrix\": {}}") == ["matrix.apps: is required"])
        #expect(errors("{\(Self.baseConfig), \"matrix\": {\"listen\": \"nowhere\", \"maxBodyBytes\": 10, \"apps\": {\"x\": {\"app\": \"com.example.ap\"}}}}")
                == [#"matrix.listen: expected host:port such as "127.0.0.1:8090" or "[::1]:8090", found "nowhere""#,
                    "matrix.maxBodyBytes: must be between 4096 and 8388608, found 10",
                    #"matrix.apps.x.app: unknown app "com.example.ap"; configured: com.example.app (did you mean "com.example.app"?)"#])
        let bad = errors("{\(Self.baseConfig), \"matrix\": {\"apps\": {\"x\": {\"app\": \"com.example.app\", \"defaultPayload\": {\"aps\": {\"url-args\": [], \"badge\": \"1\"}}}}}}")
        #expect(bad.count == 2)
        #expect(bad.first?.hasPrefix("matrix.apps.x.defaultPayload.aps.badge: has a value Apple does not accept") == true)
        #expect(bad.last?.hasPrefix("matrix.apps.x.defaultPayload.aps.url-args: Herald does not send this aps key") == true)
        #expect(errors("{\(Self.baseConfig), \"matrix\": {\"apps\": {\"x\": {\"app\": \"com.example.app\", \"defaultPayload\": {\"herald_id\": \"1\"}}}}}")
                == ["matrix.apps.x.defaultPayload.herald_id: is reserved: Herald sets it to the notification id in every APNs payload"])
    }
}

/// The configuration with the `matrix` section registered, as `main` registers it.
func parse(_ json: String) throws(ConfigurationError) -> HeraldConfiguration {
    var registry = TransportRegistry()
    registry.register(LogTransport.self)
    registry.register(section: MatrixConfiguration.self)
    return try HeraldConfiguration.parse(Data(json.utf8), source: "test.json", baseDirectory: "/etc/herald", registry: registry, environment: [:])
}

func errors(_ json: String) -> [String] {
    do { _ = try parse(json); return [] } catch { return error.errors.map(\.description) }
}
