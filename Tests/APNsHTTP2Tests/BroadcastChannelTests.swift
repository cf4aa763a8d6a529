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
