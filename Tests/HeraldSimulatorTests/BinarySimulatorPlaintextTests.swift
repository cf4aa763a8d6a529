import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldSimulator

/// The gateway over real loopback sockets, without TLS: stream handling (split and batched
/// frames), the error response on the wire, the close, and what is recorded.
@Suite("Binary gateway over TCP")
struct BinarySimulatorPlaintextTests {
    let good = BinaryWire.token(0x21)

    private func started(_ rules: APNsBinaryRules = APNsBinaryRules(),
                         record: BinaryRecordSink? = nil) throws -> APNsBinarySimulator {
        var configuration = APNsBinarySimulator.Configuration(rules: rules)
        configuration.record = record
        let sim = APNsBinarySimulator(configuration: configuration)
        try sim.start()
        #expect(sim.port > 0)
        return sim
    }

    @Test func aSilentGatewayAnswersNothingAndWaitsForTheClientToClose() async throws {
        var rules = APNsBinaryRules()
        rules.answersErrors = false
        rules.invalidTokens = [BinaryWire.hex(BinaryWire.token(0x66))]
        let sim = try started(rules)
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)
        #expect(socket.send(BinaryWire.frame(token: good, identifier: 1) + BinaryWire.frame(token: BinaryWire.token(0x66), identifier: 2)
                            + BinaryWire.frame(token: good, identifier: 3)))
        #expect(await sim.waitForRejections(count: 1))
        socket.shutdownWrite()
        #expect(socket.readToEnd().isEmpty)  // no error response, closed only after the client closed
        #expect(sim.received.map(\.notification.identifier) == [1])
        #expect(sim.rejections.map(\.response.identifier) == [2])
    }

    @Test func dropAfterClosesWithoutAnAnswerOnTheFirstConnectionsOnly() async throws {
        var rules = APNsBinaryRules()
        rules.dropAfter = 1
        rules.dropConnections = 1
        let sim = try started(rules)
        defer { sim.stop() }
        let first = try TestSocket(port: sim.port)
        first.send(BinaryWire.frame(token: good, identifier: 1) + BinaryWire.frame(token: good, identifier: 2))
        #expect(first.readToEnd().isEmpty)
        #expect(sim.dropCount == 1 && sim.rules.dropAfter == nil)
        let second = try TestSocket(port: sim.port)
        second.send(BinaryWire.frame(token: good, identifier: 3) + BinaryWire.frame(token: good, identifier: 4))
        second.shutdownWrite()
        #expect(second.readToEnd().isEmpty)
        #expect(sim.received.map(\.notification.identifier) == [1, 3, 4])
    }

    @Test func acceptsFramesSplitAcrossWritesAndBatchedInOne() async throws {
        let sim = try started()
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)
        // One frame in three pieces, with pauses so they arrive as separate reads.
        let first = BinaryWire.frame(token: good, identifier: 1, priority: 10)
        #expect(socket.send(Array(first[0..<3])))
        try await Task.sleep(nanoseconds: 30_000_000)
        #expect(socket.send(Array(first[3..<20])))
        try await Task.sleep(nanoseconds: 30_000_000)
        #expect(socket.send(Array(first[20...])))
        // Then 50 notifications of all three commands in one write.
        var batch: [UInt8] = []
        for i in 2...51 {
            switch i % 3 {
            case 0: batch += BinaryWire.simple(token: good)
            case 1: batch += BinaryWire.enhanced(identifier: UInt32(i), token: good)
            default: batch += BinaryWire.frame(token: good, identifier: UInt32(i))
            }
        }
        #expect(socket.send(batch))
        #expect(await sim.waitForNotifications(count: 51))
        let received = sim.received
        try #require(received.count == 51)
        #expect(received.first?.notification.identifier == 1)
        #expect(received[49].notification.identifier == 50)  // 51 is a command 0: no identifier
        #expect(received.last?.notification.command == 0)
        #expect(received.allSatisfy { $0.connection == 1 && $0.client == nil && $0.payloadIsJSON })
        #expect(sim.rejections.isEmpty)
    }

    @Test func errorResponseOnTheWireThenClose() async throws {
        let sim = try started()
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)
        socket.send(BinaryWire.enhanced(identifier: 1, token: good)
                    + BinaryWire.enhanced(identifier: 2, token: BinaryWire.token(1, count: 20))
                    + BinaryWire.enhanced(identifier: 3, token: good))
        let reply = socket.readToEnd()  // returns at EOF: the gateway closed
        #expect(BinaryWire.decodeError(reply) == .init(command: 8, status: 5, identifier: 2))
        #expect(sim.received.map(\.notification.identifier) == [1])
        let rejection = try #require(sim.rejections.first)
        #expect(rejection.response.reason == "token is 20 bytes; command 1 requires 32")
        #expect(rejection.command == 1)
        #expect(rejection.discardedBytes == BinaryWire.enhanced(identifier: 3, token: good).count)
    }

    @Test func invalidTokenSetWhileConnected() async throws {
        let sim = try started()
        defer { sim.stop() }
        let dead = BinaryWire.token(0xd0)
        let socket = try TestSocket(port: sim.port)
        socket.send(BinaryWire.frame(token: dead, identifier: 1))
        #expect(await sim.waitForNotifications(count: 1))
        sim.setInvalidTokens([BinaryWire.hex(dead).uppercased()])
        socket.send(BinaryWire.frame(token: dead, identifier: 2))
        #expect(BinaryWire.decodeError(socket.readToEnd()) == .init(command: 8, status: 8, identifier: 2))
        #expect(sim.rejections.first?.response.reason == "token d0d0d0d0… is configured as invalid")
    }

    @Test func shutdownAfterNPerConnection() async throws {
        var rules = APNsBinaryRules()
        rules.shutdownAfter = 3
        let sim = try started(rules)
        defer { sim.stop() }
        for round in 0..<2 {
            let socket = try TestSocket(port: sim.port)
            var bytes: [UInt8] = []
            for i in 1...5 { bytes += BinaryWire.frame(token: good, identifier: UInt32(round * 10 + i)) }
            socket.send(bytes)
            #expect(BinaryWire.decodeError(socket.readToEnd()) == .init(command: 8, status: 10, identifier: UInt32(round * 10 + 3)))
        }
        #expect(sim.received.map { $0.notification.identifier! } == [1, 2, 3, 11, 12, 13])
        #expect(sim.received.map(\.connection) == [1, 1, 1, 2, 2, 2])
    }

    @Test func errorSurvivesAClientThatKeepsSending() async throws {
        // The gateway stops reading at the error; closing with unread input would reset the
        // connection and could destroy the error response. It must linger and drain instead.
        let sim = try started()
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)
        var flood: [UInt8] = []
        for i in 0..<20_000 { flood += BinaryWire.frame(token: good, identifier: UInt32(i + 2)) }
        socket.send(BinaryWire.frame(token: nil, identifier: 1) + flood)
        #expect(BinaryWire.decodeError(socket.readToEnd()) == .init(command: 8, status: 2, identifier: 1))
        #expect(sim.received.isEmpty)
    }

    @Test func unknownCommandClosesWithProtocolError() async throws {
        let sim = try started()
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)
        socket.send([0x42, 0, 0, 0, 0, 0, 0])
        #expect(BinaryWire.decodeError(socket.readToEnd()) == .init(command: 8, status: 128, identifier: 0))
        sim.updateRules { $0.protocolErrorStatus = .unknown }
        let again = try TestSocket(port: sim.port)
        again.send([0x42])
        #expect(BinaryWire.decodeError(again.readToEnd()) == .init(command: 8, status: 255, identifier: 0))
    }

    @Test func recordsJSONLines() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let sink = try BinaryRecordSink(path: dir.file("out.jsonl"))
        let sim = try started(record: sink)
        let socket = try TestSocket(port: sim.port)
        socket.send(BinaryWire.frame(token: good, payload: Array(#"{"aps":{"badge":3}}"#.utf8), identifier: 7, expiry: 1_700_000_000, priority: 5)
                    + BinaryWire.frame(token: good, payload: Array("plain text".utf8), identifier: 8)
                    + BinaryWire.frame(token: nil, identifier: 9))
        _ = socket.readToEnd()
        #expect(await sim.waitForRejections(count: 1))
        sim.stop()
        sink.close()
        let lines = try String(contentsOfFile: dir.file("out.jsonl"), encoding: .utf8).split(separator: "\n")
        let objects = try lines.map { try JSONValue.parse(String($0)) }
        #expect(objects.map { $0["event"]?.stringValue } == ["connected", "notification", "notification", "error"])
        let first = objects[1]
        #expect(first["identifier"]?.intValue == 7)
        #expect(first["expiry"]?.intValue == 1_700_000_000)
        #expect(first["priority"]?.intValue == 5)
        #expect(first["token"]?.stringValue == BinaryWire.hex(good))
        #expect(first["json"]?.boolValue == true)
        #expect(first["payload"]?["aps"]?["badge"]?.intValue == 3)
        #expect(objects[2]["json"]?.boolValue == false)
        #expect(objects[2]["payload"]?.stringValue == "plain text")
        #expect(objects[3]["status"]?.intValue == 2)
        #expect(objects[3]["identifier"]?.intValue == 9)
        #expect(objects[3]["reason"]?.stringValue == "the frame has no item 1 (device token)")
    }

    @Test func retainLimitKeepsTheLatest() async throws {
        var configuration = APNsBinarySimulator.Configuration()
        configuration.retainLimit = 5
        let sim = APNsBinarySimulator(configuration: configuration)
        try sim.start()
        defer { sim.stop() }
        let socket = try TestSocket(port: sim.port)
        socket.send((1...20).flatMap { BinaryWire.frame(token: good, identifier: UInt32($0)) })
        #expect(await sim.waitForNotifications(count: 20))
        #expect(sim.acceptedCount == 20)
        #expect(sim.received.map(\.notification.identifier) == [16, 17, 18, 19, 20])
    }

    @Test func stopClosesIdleConnections() async throws {
        let sim = try started()
        let socket = try TestSocket(port: sim.port)
        socket.send(BinaryWire.simple(token: good))
        #expect(await sim.waitForNotifications(count: 1))
        sim.stop()
        #expect(socket.readToEnd().isEmpty)
        #expect(throws: (any Error).self) { _ = try TestSocket(port: sim.port) }
    }
}
