import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldSimulator

/// JSON Lines records, counters and the response ids.
@Suite("HTTP/2 simulator records")
struct HTTP2RecorderTests {
    func notification(payload: String) -> ReceivedNotification {
        ReceivedNotification(time: Date(millisecondsSince1970: 1_767_225_600_123), connectionID: 2, streamID: 5,
                             deviceToken: sampleToken, topic: "com.example.app.voip", pushType: .voip,
                             apnsID: "123e4567-e89b-12d3-a456-426655440000", uniqueID: nil,
                             headers: [.init(name: ":method", value: "POST"), .init(name: "apns-priority", value: "10"),
                                       .init(name: "authorization", value: "<redacted>")],
                             payload: Array(payload.utf8), keyID: nil, teamID: nil)
    }

    @Test func jsonLineEmbedsJSONPayloads() throws {
        let line = String(decoding: notification(payload: #"{"aps":{"alert":"x"}}"#).jsonLine, as: UTF8.self)
        #expect(line.hasSuffix("}\n"))
        let value = try JSONValue.parse(line)
        #expect(value["time"]?.stringValue == "2026-01-01T00:00:00.123Z")
        #expect(value["connection"]?.intValue == 2)
        #expect(value["stream"]?.intValue == 5)
        #expect(value["pushType"]?.stringValue == "voip")
        #expect(value["priority"]?.intValue == 10)
        #expect(value["payload"]?["aps"]?["alert"]?.stringValue == "x")
        #expect(value["headers"]?[":method"] == nil)
        #expect(value["uniqueId"] == nil)
    }

    @Test func jsonLineQuotesOtherPayloads() throws {
        let value = try JSONValue.parse(String(decoding: notification(payload: "not \"json\"").jsonLine, as: UTF8.self))
        #expect(value["payload"]?.stringValue == "not \"json\"")
    }

    @Test func countersAndFile() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let recorder = try HTTP2Recorder(recordFile: dir.file("r.jsonl"), retains: false)
        recorder.connectionOpened()
        recorder.answered(nil, notification: notification(payload: "{}"))
        recorder.answered(.badTopic, notification: nil)
        recorder.answered(.badTopic, notification: nil)
        recorder.flush()
        let c = recorder.counters
        #expect(c == HTTP2SimulatorCounters(connections: 1, requests: 3, accepted: 1, rejected: ["BadTopic": 2]))
        #expect(recorder.received.isEmpty)
        #expect(try String(contentsOfFile: dir.file("r.jsonl"), encoding: .utf8).split(separator: "\n").count == 1)
        #expect(throws: HTTP2SimulatorError.self) { try HTTP2Recorder(recordFile: "/nonexistent/dir/r.jsonl", retains: true) }
    }

    @Test func generatedIDsAreLowerCaseV4UUIDs() {
        var generator = HTTP2UUIDGenerator()
        var seen = Set<String>()
        for _ in 0..<1000 {
            let id = generator.string()
            #expect(UUID(uuidString: id) != nil)
            #expect(id == id.lowercased())
            #expect(Array(id)[14] == "4")
            #expect("89ab".contains(Array(id)[19]))
            seen.insert(id)
        }
        #expect(seen.count == 1000)
    }
}
