import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsHTTP2

/// The transport's channel client and broadcast send against the simulator's management port
/// and provider port, over real TLS with a provider token.
@Suite(.serialized) struct BroadcastChannelTests {
    static let bundle = "com.example.app"

    static func fixture(channelLimit: Int = 10_000) throws -> TransportFixture {
        try TransportFixture.tokenAuth { c in
            c.managementPort = 0
            c.channelLimit = channelLimit
        }
    }

    static func transport(_ f: TransportFixture, engine: Engine) throws -> APNsHTTP2Transport {
        try f.transport(engine: engine, ["managementEndpoint": .string("https://127.0.0.1:\(f.apns.simulator.managementPort)")])
    }

    static func update(_ score: Int) -> [UInt8] {
        Array(#"{"aps":{"event":"update","timestamp":\#(1_790_000_000 + score),"content-state":{"score":\#(score)}}}"#.utf8)
    }

    @Test(arguments: Engine.allCases) func channelLifecycleAndBroadcast(engine: Engine) async throws {
        let f = try Self.fixture()
        defer { f.apns.stop() }
        let transport = try Self.transport(f, engine: engine)
        try await transport.start()
        let channels = transport.channels

        let channel = try await channels.create(bundleID: Self.bundle, storagePolicy: .mostRecentMessageStored).get()
        #expect(f.apns.simulator.channels.channel(bundle: Self.bundle, id: channel.id)?.storagePolicy == 1)
        #expect(try await channels.read(bundleID: Self.bundle, channelID: channel.id).get() == channel)
        #expect(try await channels.list(bundleID: Self.bundle).get() == [channel.id])

        let receipt = try await channels.broadcast(bundleID: Self.bundle, channelID: channel.id, payload: Self.update(3),
                                                   priority: 5, expiration: 1_790_003_600).get()
        let received = try #require(await f.apns.simulator.waitForBroadcasts(count: 1, timeout: 10))
        #expect(received[0].channelID == channel.id)
        #expect(received[0].bundleID == Self.bundle)
        #expect(received[0].priority == 5 && received[0].expiration == 1_790_003_600)
        #expect(received[0].payloadJSON?["aps"]?["content-state"]?["score"]?.intValue == 3)
        #expect(receipt.requestID == received[0].requestID)
        #expect(receipt.uniqueID != nil && receipt.uniqueID == received[0].uniqueID)

        try await channels.delete(bundleID: Self.bundle, channelID: channel.id).get()
        #expect(try await channels.list(bundleID: Self.bundle).get() == [])
        let gone = await channels.read(bundleID: Self.bundle, channelID: channel.id)
        #expect(gone.failure == .refused(status: 404, reason: .channelNotRegistered, requestID: gone.failure?.requestID))
        let late = await channels.broadcast(bundleID: Self.bundle, channelID: channel.id, payload: Self.update(4), priority: 10)
        #expect(late.failure?.reason == .channelNotRegistered)
        await transport.shutdown()
    }

    @Test(arguments: Engine.allCases) func certificateAuthManagesChannelsAndBroadcasts(engine: Engine) async throws {
        let apns = try HTTP2SimulatorHarness.certificateAuth { $0.managementPort = 0 }
        defer { apns.stop() }
        let f = TransportFixture(apns: apns, certs: apns.certificates)
        let transport = try f.transport(engine: engine, ["certFile": .string(f.certs.clientCombined),
                                                         "managementEndpoint": .string("https://127.0.0.1:\(apns.simulator.managementPort)")],
                                        token: false)
        try await transport.start()
        let channel = try await transport.channels.create(bundleID: f.certs.topic, storagePolicy: .noMessageStored).get()
        _ = try await transport.channels.broadcast(bundleID: f.certs.topic, channelID: channel.id, payload: Self.update(1), priority: 10).get()
        #expect(apns.simulator.channels.broadcasts.map(\.channelID) == [channel.id])
        await transport.shutdown()
    }

    @Test func theLimitIsApplesReason() async throws {
        let f = try Self.fixture(channelLimit: 2)
        defer { f.apns.stop() }
        let transport = try Self.transport(f, engine: .nghttp2)
        try await transport.start()
        _ = try await transport.channels.create(bundleID: Self.bundle, storagePolicy: .noMessageStored).get()
        _ = try await transport.channels.create(bundleID: Self.bundle, storagePolicy: .noMessageStored).get()
        let third = await transport.channels.create(bundleID: Self.bundle, storagePolicy: .noMessageStored)
        #expect(third.failure?.reason == .cannotCreateChannelConfig)
        #expect(third.failure?.isTemporary == false)
        await transport.shutdown()
    }

    @Test func aBroadcastThatStartsAnActivityIsRefused() async throws {
        let f = try Self.fixture()
        defer { f.apns.stop() }
        let transport = try Self.transport(f, engine: .curl)
        try await transport.start()
        let channel = try await transport.channels.create(bundleID: Self.bundle, storagePolicy: .noMessageStored).get()
        let start = Array(#"{"aps":{"event":"start","timestamp":1,"content-state":{},"attributes-type":"T","attributes":{},"alert":"x"}}"#.utf8)
        let refused = await transport.channels.broadcast(bundleID: Self.bundle, channelID: channel.id, payload: start, priority: 10)
        #expect(refused.failure?.reason == .unknown("BadLiveActivityPayload"))
        #expect(f.apns.simulator.channels.broadcasts.isEmpty)
        await transport.shutdown()
    }

    @Test func idsThatCannotGoIntoARequestAreRefusedBeforeAnyRequest() async throws {
        let f = try Self.fixture()
        defer { f.apns.stop() }
        let transport = try Self.transport(f, engine: .curl)
        try await transport.start()
        let badBundle = await transport.channels.list(bundleID: "com.example.app/../x")
        #expect(badBundle.failure == .setup("bundle id: expected letters, digits, '.', '-' and '_'"))
        let badChannel = await transport.channels.read(bundleID: Self.bundle, channelID: "abc\r\nx-injected: 1")
        #expect(badChannel.failure == .setup("channel id: expected Apple's base64 channel id"))
        #expect(f.apns.simulator.channels.broadcasts.isEmpty)
        await transport.shutdown()
    }

    @Test func channelFailuresBecomeTheCoresOutcomes() {
        #expect(APNsChannelError.refused(status: 404, reason: .channelNotRegistered, requestID: nil).outcome
                == .tokenInvalid(since: nil, reason: "ChannelNotRegistered"))
        #expect(APNsChannelError.refused(status: 400, reason: .badChannelId, requestID: nil).outcome
                == .tokenInvalid(since: nil, reason: "BadChannelId"))
        #expect(APNsChannelError.refused(status: 429, reason: .tooManyRequests, requestID: nil).outcome
                == .retry(after: nil, reason: "TooManyRequests"))
        #expect(APNsChannelError.refused(status: 503, reason: nil, requestID: nil).outcome == .retry(after: nil, reason: "HTTP 503"))
        #expect(APNsChannelError.refused(status: 400, reason: .cannotCreateChannelConfig, requestID: nil).outcome
                == .rejected(reason: "CannotCreateChannelConfig"))
        #expect(APNsChannelError.refused(status: 400, reason: .unknown("SomethingNew"), requestID: nil).outcome
                == .rejected(reason: "SomethingNew"))
        if case .setupFailure(let why) = APNsChannelError.refused(status: 403, reason: .invalidProviderToken, requestID: nil).outcome {
            #expect(why.hasPrefix("InvalidProviderToken: "))
        } else {
            Issue.record("a refused provider token is a setup failure")
        }
        if case .setupFailure(let why) = APNsChannelError.refused(status: 400, reason: .featureNotEnabled, requestID: nil).outcome {
            #expect(why.contains("Broadcast capability"))
        } else {
            Issue.record("FeatureNotEnabled is a setup failure")
        }
        #expect(APNsChannelError.noAnswer("connection lost").outcome == .retry(after: nil, reason: "connection lost"))
    }

    @Test func managementEndpointDefaultsToApplesHosts() throws {
        #expect(APNsHTTP2Configuration.Endpoint.appleManagement(.production).description == "https://api-manage-broadcast.push.apple.com:2196")
        #expect(APNsHTTP2Configuration.Endpoint.appleManagement(.sandbox).description == "https://api-manage-broadcast.sandbox.push.apple.com:2195")
        let f = try Self.fixture()
        defer { f.apns.stop() }
        let defaulted = try f.transport()
        #expect(defaulted.managementClient.configuration.host == "api-manage-broadcast.sandbox.push.apple.com")
        #expect(defaulted.managementClient.configuration.port == 2195)
    }
}

extension Result {
    var failure: Failure? { if case .failure(let e) = self { return e }; return nil }
}

extension APNsChannelError {
    var reason: APNsErrorReason? { if case .refused(_, let r, _) = self { return r }; return nil }
    var requestID: String? { if case .refused(_, _, let id) = self { return id }; return nil }
}

/// Herald's Live Activity pushes (`apns.live_activity`) against the simulator, which checks
/// Apple's payload rules: a push-to-start that subscribes to a channel, updates, and an end.
@Suite(.serialized) struct LiveActivityPushTests {
    static func content(_ live: LiveActivityContent, alert: AlertContent? = nil) -> NotificationContent {
        var content = NotificationContent(alert: alert)
        content.apns.liveActivity = live
        return content
    }

    @Test(arguments: Engine.allCases) func startUpdateAndEndKeepApplesRules(engine: Engine) async throws {
        let f = try BroadcastChannelTests.fixture()
        defer { f.apns.stop() }
        let transport = try BroadcastChannelTests.transport(f, engine: engine)
        try await transport.start()
        let channel = try await transport.channels.create(bundleID: BroadcastChannelTests.bundle, storagePolicy: .noMessageStored).get()
        let start = LiveActivityContent(event: .start, timestamp: 1_790_000_000, contentState: ["score": 0],
                                        attributesType: "MatchAttributes", attributes: ["home": "A", "away": "B"],
                                        inputPushChannel: channel.id)
        let update = LiveActivityContent(event: .update, timestamp: 1_790_000_060, contentState: ["score": 1], staleDate: 1_790_000_660)
        let end = LiveActivityContent(event: .end, timestamp: 1_790_000_120, contentState: ["score": 2], dismissalDate: 1_790_001_000)
        let batch = [
            TransportFixture.delivery(1, content: Self.content(start, alert: .fields(Alert(title: "A v B", body: "Kick-off")))),
            TransportFixture.delivery(2, content: Self.content(update)),
            TransportFixture.delivery(3, content: Self.content(end)),
        ]
        let outcomes = await transport.deliver(batch)
        #expect(outcomes.allSatisfy { if case .delivered = $0 { true } else { false } }, "\(outcomes)")
        let received = try #require(await f.apns.simulator.waitForNotifications(count: 3, timeout: 10))
        let byToken = Dictionary(uniqueKeysWithValues: received.map { ($0.deviceToken, $0) })
        let started = try #require(byToken[TransportFixture.token(1)]?.payloadJSON?["aps"])
        #expect(started["event"] == "start" && started["input-push-channel"]?.stringValue == channel.id)
        #expect(started["attributes-type"] == "MatchAttributes" && started["alert"]?["title"] == "A v B")
        #expect(byToken[TransportFixture.token(1)]?.topic == "com.example.app.push-type.liveactivity")
        #expect(byToken[TransportFixture.token(2)]?.payloadJSON?["aps"]?["stale-date"]?.intValue == 1_790_000_660)
        #expect(byToken[TransportFixture.token(3)]?.payloadJSON?["aps"]?["dismissal-date"]?.intValue == 1_790_001_000)
        await transport.shutdown()
    }

    @Test func pushesThatBreakApplesRulesAreRefusedNamingTheField() {
        func problem(_ live: LiveActivityContent, alert: AlertContent? = nil) -> String? {
            do {
                _ = try APNsRoute.render(Self.content(live, alert: alert), context: RenderContext(notificationID: "n1", app: "a", topic: "com.example.app"))
                return nil
            } catch {
                return error.field
            }
        }
        let alert = AlertContent.text("Kick-off")
        #expect(problem(LiveActivityContent(event: .start, timestamp: 1, contentState: [:], attributes: [:]), alert: alert)
                == "apns.live_activity.attributes_type")
        #expect(problem(LiveActivityContent(event: .start, timestamp: 1, contentState: [:], attributesType: "T"), alert: alert)
                == "apns.live_activity.attributes")
        #expect(problem(LiveActivityContent(event: .start, timestamp: 1, attributesType: "T", attributes: [:]), alert: alert)
                == "apns.live_activity.content_state")
        #expect(problem(LiveActivityContent(event: .start, timestamp: 1, contentState: [:], attributesType: "T", attributes: [:])) == "alert")
        #expect(problem(LiveActivityContent(event: .update, timestamp: 1)) == "apns.live_activity.content_state")
        #expect(problem(LiveActivityContent(event: .update, timestamp: 1, contentState: [:], inputPushChannel: "dGVzdA=="))
                == "apns.live_activity.input_push_channel")
        #expect(problem(LiveActivityContent(event: .start, timestamp: 1, contentState: [:], attributesType: "T", attributes: [:],
                                            inputPushChannel: "no spaces"), alert: alert) == "apns.live_activity.input_push_channel")
        #expect(problem(LiveActivityContent(event: .end, timestamp: 1)) == nil)
    }
}
