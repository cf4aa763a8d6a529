import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldSimulator

@Suite("Feedback service over TCP")
struct FeedbackSimulatorPlaintextTests {
    @Test func sendsEveryTupleThenClosesAndEmpties() async throws {
        let a = BinaryWire.token(0xa1), b = BinaryWire.token(0xb2)
        let sim = FeedbackSimulator(configuration: .init(deadTokens: [.init(token: a, time: 1_600_000_000)]))
        try sim.start()
        defer { sim.stop() }
        try sim.addDeadToken(BinaryWire.hex(b), time: Date(timeIntervalSince1970: 1_700_000_123))

        let first = try TestSocket(port: sim.port).readToEnd()
        let tuples = try #require(BinaryWire.decodeFeedback(first))
        #expect(first.count == 2 * (4 + 2 + 32))
        #expect(tuples.map(\.time) == [1_600_000_000, 1_700_000_123])
        #expect(tuples.map(\.token) == [a, b])
        #expect(first[4...5] == [0, 32])

        // The list empties once read.
        #expect(sim.pending.isEmpty)
        #expect(try TestSocket(port: sim.port).readToEnd().isEmpty)
        #expect(await sim.waitForDeliveries(count: 2))
        #expect(sim.deliveries.map(\.entries.count) == [2, 0])

        // New dead tokens show up on the next connection.
        sim.addDeadToken(a, time: 5)
        #expect(BinaryWire.decodeFeedback(try TestSocket(port: sim.port).readToEnd())?.map(\.time) == [5])
    }

    @Test func gatewayReportsUninstalledAppsToFeedback() async throws {
        let feedback = FeedbackSimulator(configuration: .init())
        try feedback.start()
        defer { feedback.stop() }
        var configuration = APNsBinarySimulator.Configuration()
        let gone = BinaryWire.token(0x60)
        configuration.uninstalledTokens = [BinaryWire.hex(gone)]
        configuration.feedback = feedback
        let gateway = APNsBinarySimulator(configuration: configuration)
        try gateway.start()
        defer { gateway.stop() }

        let socket = try TestSocket(port: gateway.port)
        socket.send(BinaryWire.frame(token: gone, identifier: 1) + BinaryWire.frame(token: BinaryWire.token(0x61), identifier: 2))
        #expect(await gateway.waitForNotifications(count: 2))
        #expect(gateway.rejections.isEmpty)  // APNs accepted those; it learned later
        let tuples = try #require(BinaryWire.decodeFeedback(try TestSocket(port: feedback.port).readToEnd()))
        #expect(tuples.map(\.token) == [gone])
        let now = UInt32(Date().timeIntervalSince1970)
        #expect(tuples[0].time <= now && tuples[0].time + 60 > now)
    }
}
