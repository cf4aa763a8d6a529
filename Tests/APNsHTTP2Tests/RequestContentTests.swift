import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// What each request carries, as the simulator received it: topic and priority per push type,
/// the payload, and Apple's size limits.
@Suite(.serialized) struct RequestContentTests {
    @Test(arguments: Engine.allCases) func everyPushTypeGetsItsTopicSuffixAndAValidPriority(engine: Engine) async throws {
        // Apple's apns-topic for each apns-push-type ("Sending notification requests to APNs");
        // an MDM push goes to the topic of the MDM push certificate, unchanged.
        let mdmTopic = "com.apple.mgmt.External.6f2c1a4e-1d2b-4c3a-9e8f-0a1b2c3d4e5f"
        let expected: [PushType: String] = [
            .alert: "com.example.app", .background: "com.example.app", .mdm: mdmTopic,
            .location: "com.example.app.location-query", .voip: "com.example.app.voip",
            .complication: "com.example.app.complication", .fileprovider: "com.example.app.pushkit.fileprovider",
            .liveactivity: "com.example.app.push-type.liveactivity", .pushtotalk: "com.example.app.voip-ptt",
            .widgets: "com.example.app.push-type.widgets", .controls: "com.example.app.push-type.controls",
        ]
        #expect(Set(expected.keys) == Set(PushType.allCases))
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        var batch: [Delivery] = []
        for (i, type) in PushType.allCases.enumerated() {
            var content: NotificationContent
            switch type {
            case .background: content = NotificationContent(); content.apns.contentAvailable = true
            case .mdm: content = NotificationContent(data: ["mdm": "5a3e7c1b-2f4d-4e6a-8b9c-0d1e2f3a4b5c"])
            case .liveactivity:
                content = NotificationContent()
                content.apns.liveActivity = LiveActivityContent(event: .update, timestamp: 1_790_000_000, contentState: ["score": 1])
            default: content = NotificationContent(alert: .text("x"))
            }
            content.apns.pushType = type
            var delivery = TransportFixture.delivery(i + 1, content: content)
            if type == .mdm { delivery.topic = mdmTopic }
            batch.append(delivery)
        }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes.allSatisfy { if case .delivered = $0 { return true }; return false }, "\(outcomes)")
        let byType = Dictionary(uniqueKeysWithValues: f.apns.simulator.received.map { ($0.pushType, $0) })
        #expect(byType.count == 11)
        for type in PushType.allCases {
            #expect(byType[type]?.header("apns-push-type") == type.rawValue)
            #expect(byType[type]?.header("apns-topic") == expected[type], "\(type)")
            #expect(byType[type]?.priority == (type == .background ? 5 : 10), "\(type)")
        }
    }

    @Test(arguments: Engine.allCases) func backgroundPushesAlwaysGoWithPriorityFive(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        let asked: [Int?] = [10, 1, 5, nil]
        let batch = asked.enumerated().map { i, priority in
            var content = NotificationContent(data: ["n": .number(Double(i))])
            content.apns.pushType = .background
            content.apns.contentAvailable = true
            content.apns.priority = priority
            return TransportFixture.delivery(i + 1, content: content)
        }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes == batch.map { .delivered(receipt: $0.messageID.uuidString.lowercased()) })
        let received = f.apns.simulator.received.sorted { $0.deviceToken < $1.deviceToken }
        #expect(received.map { $0.header("apns-priority") } == ["5", "5", "5", "5"])
        #expect(received.map(\.pushType) == Array(repeating: .background, count: 4))
    }

    @Test(arguments: Engine.allCases) func widgetPushesCarryContentChanged(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        var content = NotificationContent()
        content.apns.pushType = .widgets
        let outcomes = await transport.deliver([TransportFixture.delivery(1, content: content)])
        await transport.shutdown()
        if case .delivered = outcomes[0] {} else { Issue.record("expected delivered, got \(outcomes[0])") }
        let received = try #require(f.apns.simulator.received.first)
        #expect(received.pushType == .widgets && received.topic == "com.example.app.push-type.widgets")
        #expect(received.payloadString == #"{"aps":{"content-changed":true},"herald_id":"n1"}"#)
    }

    /// `content` with a custom key `p` padded so that its payload, with the `herald_id` of
    /// notification `id`, is exactly `bytes` long.
    static func padded(_ content: NotificationContent, to bytes: Int, id: String) -> NotificationContent {
        var c = content
        c.data["p"] = ""
        let base = APNsPayload.encode(c, notificationID: id).count
        c.data["p"] = .string(String(repeating: "x", count: bytes - base))
        return c
    }

    @Test(arguments: Engine.allCases) func payloadLimitsAreCheckedBeforeSending(engine: Engine) async throws {
        let f = try TransportFixture.tokenAuth()
        defer { f.apns.stop() }
        let transport = try f.transport(engine: engine)
        try await transport.start()
        let alert = NotificationContent(alert: .text("x"))
        var voip = NotificationContent(data: ["call": "1"])
        voip.apns.pushType = .voip
        // Rendered without the accept-time check (a caller driving the transport directly): the transport refuses what is over.
        let batch = APNsRoute.rendered([TransportFixture.delivery(1, content: Self.padded(alert, to: 4097, id: "n1")),
                                        TransportFixture.delivery(2, content: Self.padded(voip, to: 5121, id: "n2")),
                                        TransportFixture.delivery(3, content: Self.padded(alert, to: 4096, id: "n3")),
                                        TransportFixture.delivery(4, content: Self.padded(voip, to: 5120, id: "n4"))])
        #expect(batch.map(\.payload.body.count) == [4097, 5121, 4096, 5120])
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes[0] == .rejected(reason: "PayloadTooLarge: the payload is 4097 bytes; APNs accepts at most 4096 for alert notifications"))
        #expect(outcomes[1] == .rejected(reason: "PayloadTooLarge: the payload is 5121 bytes; APNs accepts at most 5120 for voip notifications"))
        #expect(outcomes[2] == .delivered(receipt: batch[2].messageID.uuidString.lowercased()))
        #expect(outcomes[3] == .delivered(receipt: batch[3].messageID.uuidString.lowercased()))
        // Nothing over the limit reached the server; the two at the limit arrived whole.
        #expect(f.apns.simulator.counters.requests == 2)
        let received = f.apns.simulator.received.sorted { $0.deviceToken < $1.deviceToken }
        #expect(received.map(\.deviceToken) == [TransportFixture.token(3), TransportFixture.token(4)])
        #expect(received.map(\.payload) == [batch[2].payload.body, batch[3].payload.body])
    }
}
