import Foundation
import HeraldCore
import HeraldMatrix
import HeraldTestKit
import Testing

/// Sygnal's gcm (v1) and webpush payloads for Android and web pushers: the fields, truncation at
/// the byte, strings only, low priority, `event_id_only`, `events_only`, `only_last_per_room` and
/// the default payloads.
@Suite struct MatrixPlatformPayloadTests {
    static func notification(_ json: String) throws -> MatrixNotification {
        try MatrixNotification.parse(JSONValue.parse(json))
    }

    static let specExample = MatrixFixtures.specExample

    /// The `fcm` block's `data`, and its `android` object.
    static func fcm(_ decision: MatrixPayload.Decision) -> (data: [String: JSONValue], android: JSONValue?)? {
        guard case .send(let content, _, _) = decision, case .object(let block)? = content.overrides["fcm"],
              case .object(let data)? = block["data"] else { return nil }
        return (data, block["android"])
    }

    /// The `webpush` block (the service worker's members, plus `urgency` and `topic`).
    static func web(_ decision: MatrixPayload.Decision) -> [String: JSONValue]? {
        guard case .send(let content, _, _) = decision, case .object(let block)? = content.overrides["webpush"] else { return nil }
        return block
    }

    static func device(_ data: String = "{}", pushkey: String = "fcm-token-1") throws -> MatrixDevice {
        MatrixDevice(appID: "a", pushkey: pushkey, data: try JSONValue.parse(data).objectValue)
    }

    // MARK: Android (Sygnal's gcm pushkin, api_version v1)

    @Test func androidSpecExampleIsSygnalsV1DataMessage() throws {
        let n = try Self.notification(Self.specExample)
        let decision = MatrixAndroidPayload.map(n, device: n.devices[0])
        let (data, android) = try #require(Self.fcm(decision))
        #expect(data == [
            "event_id": "$3957tyerfgewrf384", "type": "m.room.message", "sender": "@exampleuser:matrix.org",
            "sender_display_name": "Major Tom", "room_name": "Mission Control", "room_alias": "#exampleroom:matrix.org",
            "room_id": "!slw48wfj34rtnrf:example.com", "content_msgtype": "m.text",
            "content_body": "I'm floating in a most peculiar way.", "prio": "high", "unread": "2", "missed_calls": "1",
        ])
        #expect(android == ["priority": "high"])
        guard case .send(let content, let mode, let dropped) = decision else { Issue.record("not sent"); return }
        #expect(mode == .full && dropped.isEmpty)
        #expect(content.title == nil && content.body == nil && content.data.isEmpty, "data-only: no notification block")
    }

    @Test func androidValuesAreStringsOnlyAndContentKeepsOnlyItsStrings() throws {
        let n = try Self.notification(#"""
            {"notification": {"event_id": "$e", "room_id": "!r:x", "type": "m.room.message", "sender": "@a:x",
             "content": {"msgtype": "m.text", "body": "hi", "m.relates_to": {"rel_type": "m.thread"}, "n": 3, "ok": true},
             "counts": {"unread": 12, "missed_calls": 0},
             "devices": [{"app_id": "a", "pushkey": "k", "data": {"default_payload": {"flag": true, "count": 5, "nested": {"x": 1}, "s": "v"}}}]}}
            """#)
        let (data, _) = try #require(Self.fcm(MatrixAndroidPayload.map(n, device: n.devices[0])))
        for (key, value) in data { #expect(value.stringValue != nil, "\(key) is \(value.typeDescription)") }
        // Sygnal's v1 copies only the string members of content.
        #expect(data["content_body"] == "hi" && data["content_msgtype"] == "m.text")
        #expect(data["content_m.relates_to"] == nil && data["content_n"] == nil && data["content_ok"] == nil)
        // Default-payload values that are not strings are JSON-encoded (FCM v1 takes strings only).
        #expect(data["flag"] == "true" && data["count"] == "5" && data["nested"] == #"{"x":1}"# && data["s"] == "v")
        #expect(data["unread"] == "12" && data["missed_calls"] == "0")
    }

    @Test func androidFieldsAreCutTo1024BytesWithAnEllipsisNeverInsideACharacter() throws {
        // Exactly 1024 bytes: kept whole.
        let fits = String(repeating: "a", count: 1024)
        #expect(MatrixText.truncate(fits, maxBytes: 1024) == fits)
        // 1025 bytes: 1021 bytes and "…" (3 bytes) = 1024.
        let over = String(repeating: "a", count: 1025)
        let cut = MatrixText.truncate(over, maxBytes: 1024)
        #expect(cut.utf8.count == 1024 && cut == String(repeating: "a", count: 1021) + "…")
        // A 4-byte character across byte 1021 goes whole: 1020 bytes and "…".
        let emoji = String(repeating: "a", count: 1019) + "😀" + "bbbb"
        let cutEmoji = MatrixText.truncate(emoji, maxBytes: 1024)
        #expect(cutEmoji == String(repeating: "a", count: 1019) + "…" && cutEmoji.utf8.count == 1022)

        let long = String(repeating: "é", count: 600)   // 1200 bytes
        let n = MatrixNotification(eventID: "$e", roomID: "!r:x", type: "m.room.message", sender: "@a:x", senderDisplayName: long,
                                   roomName: fits, content: ["body": .string(over), "msgtype": "m.text"], devices: [])
        let (data, _) = try #require(Self.fcm(MatrixAndroidPayload.map(n, device: try Self.device())))
        #expect(data["sender_display_name"]?.stringValue == String(repeating: "é", count: 510) + "…")
        #expect(data["sender_display_name"]?.stringValue?.utf8.count == 1023)
        #expect(data["room_name"]?.stringValue == fits)
        #expect(data["content_body"]?.stringValue == cut)
    }

    @Test func androidLowPriorityIsNormalInPrioAndAndroidPriority() throws {
        var n = try Self.notification(Self.specExample)
        n.priority = .low
        let decision = MatrixAndroidPayload.map(n, device: n.devices[0])
        let (data, android) = try #require(Self.fcm(decision))
        #expect(data["prio"] == "normal" && android == ["priority": "normal"])
        guard case .send(let content, _, _) = decision else { return }
        #expect(content.priority == .low)
    }

    @Test func androidEventIDOnlySendsTheIDsPrioAndCountsBesideTheDefaultPayload() throws {
        let n = try Self.notification(Self.specExample)
        let device = try Self.device(#"{"format": "event_id_only", "default_payload": {"cs": "x"}}"#)
        let decision = MatrixAndroidPayload.map(n, device: device)
        let (data, _) = try #require(Self.fcm(decision))
        #expect(data == ["event_id": "$3957tyerfgewrf384", "room_id": "!slw48wfj34rtnrf:example.com", "prio": "high",
                         "unread": "2", "missed_calls": "1", "cs": "x"])
        guard case .send(_, let mode, _) = decision else { return }
        #expect(mode == .eventIDOnly)
        // As Synapse sends for such a pusher: an event id and no type.
        let synapse = try Self.notification(#"{"notification": {"event_id": "$e", "room_id": "!r:x", "counts": {"unread": 1}, "devices": [{"app_id": "a", "pushkey": "k"}]}}"#)
        guard case .send(_, let m2, _) = MatrixAndroidPayload.map(synapse, device: synapse.devices[0]) else { Issue.record("not sent"); return }
        #expect(m2 == .eventIDOnly)
    }

    @Test func androidDefaultPayloadsMergeAndTheEventWins() throws {
        let n = try Self.notification(Self.specExample)
        let device = try Self.device(#"{"default_payload": {"a": "pusher", "b": "pusher", "room_id": "not this", "from": "x", "google.c": "y"}}"#)
        let decision = MatrixAndroidPayload.map(n, device: device, defaultPayload: ["a": "config", "c": "config"])
        let (data, _) = try #require(Self.fcm(decision))
        #expect(data["a"] == "pusher" && data["b"] == "pusher" && data["c"] == "config")
        #expect(data["room_id"] == "!slw48wfj34rtnrf:example.com", "the notification's fields are set after the default payload")
        #expect(data["from"] == nil && data["google.c"] == nil, "FCM's reserved keys are left out")
        guard case .send(_, _, let dropped) = decision else { return }
        #expect(Set(dropped) == ["default_payload.from", "default_payload.google.c"])
        // Sygnal rejects the pushkey when default_payload is not an object.
        #expect(MatrixAndroidPayload.map(n, device: try Self.device(#"{"default_payload": "x"}"#)) == .reject(reason: "the pusher's data.default_payload is a string, not an object"))
    }

    @Test func androidBadgeOnlyUpdateCarriesPrioAndCounts() throws {
        let n = try Self.notification(#"{"notification": {"counts": {"unread": 0}, "devices": [{"app_id": "a", "pushkey": "k"}]}}"#)
        let decision = MatrixAndroidPayload.map(n, device: n.devices[0])
        #expect(Self.fcm(decision)?.data == ["prio": "high", "unread": "0"])
        guard case .send(_, let mode, _) = decision else { return }
        #expect(mode == .badgeOnly)
    }

    // MARK: The web (Sygnal's webpush pushkin)

    static let webDevice = #"{"endpoint": "https://push.example.org/s/1", "auth": "AAECAwQFBgcICQoLDA0ODw"}"#

    @Test func webSubscriptionIsThePushkeyAsP256dhWithTheEndpointAndAuthFromData() throws {
        let device = try Self.device(Self.webDevice, pushkey: "BP256dh")
        #expect(MatrixWebPayload.subscription(device)
                == ["endpoint": "https://push.example.org/s/1", "keys": ["p256dh": "BP256dh", "auth": "AAECAwQFBgcICQoLDA0ODw"]])
        #expect(MatrixWebPayload.subscription(try Self.device(#"{"endpoint": "https://push.example.org/s/1"}"#)) == nil)
        #expect(MatrixWebPayload.subscription(try Self.device(#"{"auth": "x", "endpoint": 5}"#)) == nil)
        #expect(MatrixWebPayload.subscription(MatrixDevice(appID: "a", pushkey: "k")) == nil)
    }

    @Test func webSpecExampleIsSygnalsPayload() throws {
        let n = try Self.notification(Self.specExample)
        let device = try Self.device(Self.webDevice)
        let block = try #require(Self.web(MatrixWebPayload.map(n, device: device)))
        #expect(block == [
            "event_id": "$3957tyerfgewrf384", "type": "m.room.message", "sender": "@exampleuser:matrix.org",
            "sender_display_name": "Major Tom", "room_name": "Mission Control", "room_alias": "#exampleroom:matrix.org",
            "room_id": "!slw48wfj34rtnrf:example.com", "unread": 2, "missed_calls": 1,
            "content": ["msgtype": "m.text", "body": "I'm floating in a most peculiar way."],
            "urgency": "normal",
        ])
    }

    @Test func webContentDropsFormattedBodyCutsTheBodyAndDropsALongCiphertext() throws {
        let body = String(repeating: "é", count: 1001)
        let n = MatrixNotification(eventID: "$e", roomID: "!r:x", type: "m.room.message", userIsTarget: false,
                                   content: ["body": .string(body), "formatted_body": "<b>x</b>", "n": 4], devices: [])
        let block = try #require(Self.web(MatrixWebPayload.map(n, device: try Self.device(Self.webDevice))))
        #expect(block["content"] == ["body": .string(String(repeating: "é", count: 999) + "…"), "n": 4])
        #expect(block["user_is_target"] == nil, "false is left out, as Sygnal does")
        let exact = String(repeating: "x", count: 1000)
        let kept = MatrixNotification(eventID: "$e", type: "m.room.encrypted", userIsTarget: true,
                                      content: ["body": .string(exact), "ciphertext": .string(String(repeating: "c", count: 2000))], devices: [])
        let keptBlock = try #require(Self.web(MatrixWebPayload.map(kept, device: try Self.device(Self.webDevice))))
        #expect(keptBlock["content"]?["body"]?.stringValue == exact && keptBlock["content"]?["ciphertext"]?.stringValue?.count == 2000)
        #expect(keptBlock["user_is_target"] == true)
        let long = MatrixNotification(eventID: "$e", type: "m.room.encrypted", content: ["ciphertext": .string(String(repeating: "c", count: 2001)), "algorithm": "m.megolm.v1.aes-sha2"], devices: [])
        #expect(Self.web(MatrixWebPayload.map(long, device: try Self.device(Self.webDevice)))?["content"] == ["algorithm": "m.megolm.v1.aes-sha2"])
    }

    @Test func webLowPriorityIsUrgencyLowAndOnlyLastPerRoomSetsTheTopic() throws {
        var n = try Self.notification(Self.specExample)
        n.priority = .low
        let plain = try #require(Self.web(MatrixWebPayload.map(n, device: try Self.device(Self.webDevice))))
        #expect(plain["urgency"] == "low" && plain["topic"] == nil)
        let perRoom = try Self.device(#"{"endpoint": "https://p.example/1", "auth": "x", "only_last_per_room": true}"#)
        let block = try #require(Self.web(MatrixWebPayload.map(n, device: perRoom)))
        #expect(block["topic"] == "!slw48wfj34rtnrf:example.com")
        let notTrue = try Self.device(#"{"endpoint": "https://p.example/1", "auth": "x", "only_last_per_room": "yes"}"#)
        #expect(Self.web(MatrixWebPayload.map(n, device: notTrue))?["topic"] == nil, "only true, as Sygnal checks `is True`")
    }

    @Test func webEventsOnlySkipsBadgeOnlyUpdates() throws {
        let badge = try Self.notification(#"{"notification": {"counts": {"unread": 3}, "devices": [{"app_id": "a", "pushkey": "k"}]}}"#)
        let eventsOnly = try Self.device(#"{"endpoint": "https://p.example/1", "auth": "x", "events_only": true}"#)
        #expect(MatrixWebPayload.map(badge, device: eventsOnly) == .nothing)
        #expect(Self.web(MatrixWebPayload.map(badge, device: try Self.device(Self.webDevice))) == ["unread": 3, "urgency": "normal"])
        let event = try Self.notification(Self.specExample)
        #expect(Self.web(MatrixWebPayload.map(event, device: eventsOnly)) != nil)
    }

    @Test func webDefaultPayloadsMergeAndHeraldsMembersAreLeftOut() throws {
        let n = try Self.notification(Self.specExample)
        let device = try Self.device(#"{"endpoint": "https://p.example/1", "auth": "x", "default_payload": {"a": 1, "id": "x", "ttl": 5, "room_id": "no"}}"#)
        let decision = MatrixWebPayload.map(n, device: device, defaultPayload: ["a": 0, "b": "config"])
        let block = try #require(Self.web(decision))
        #expect(block["a"] == 1 && block["b"] == "config" && block["id"] == nil && block["ttl"] == nil)
        #expect(block["room_id"] == "!slw48wfj34rtnrf:example.com")
        guard case .send(_, _, let dropped) = decision else { return }
        #expect(Set(dropped) == ["default_payload.id", "default_payload.ttl"])
        // A default_payload that is not an object is ignored (Sygnal's webpush pushkin), not rejected.
        let odd = try Self.device(#"{"endpoint": "https://p.example/1", "auth": "x", "default_payload": 3}"#)
        #expect(Self.web(MatrixWebPayload.map(n, device: odd)) != nil)
    }
}
