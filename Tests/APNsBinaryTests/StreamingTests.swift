import APNsBinaryProtocol
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTestKit
import Testing
@testable import HeraldAPNsBinary

/// The transport streaming to the simulated gateway: formats, errors mid-stream, shutdowns and
/// drops, and the proof that makes each delivery count.
@Suite(.serialized) struct StreamingTests {
    /// Delivers one notification at a time until the proofs a burst may use are spent (each is
    /// proven at once), then forgets what the gateway recorded.
    func spendProofBudget(_ transport: APNsBinaryTransport, gateway: APNsBinarySimulator) async throws {
        for n in 0..<GatewaySettings.defaultProofBurst {
            #expect(await transport.deliver([BinaryFixture.delivery(5000 + n)])[0].isDelivered)
        }
        #expect(await gateway.waitForRejections(count: GatewaySettings.defaultProofBurst))
        gateway.clearRecords()
    }

    @Test(arguments: APNsBinaryFormat.allCases)
    func everyFormatArrivesAsWritten(format: APNsBinaryFormat) async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(["format": .string(format.rawValue)])
        try await transport.start()
        var background = NotificationContent(data: ["k": "v"])
        background.apns.contentAvailable = true
        background.apns.expiration = 1_900_000_000
        let batch = [BinaryFixture.delivery(1), BinaryFixture.delivery(2, content: background), BinaryFixture.delivery(3)]
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes.allSatisfy { $0.isDelivered }, "\(outcomes)")
        #expect(outcomes.allSatisfy { $0.evidence?.contains("proof notification") == true })
        let received = f.gateway.received.map(\.notification)
        #expect(received.count == 3)
        for (i, n) in received.enumerated() {
            #expect(n.command == format.command)
            #expect(n.tokenHex == batch[i].token)
            #expect(n.payload == batch[i].payload.body)
            #expect(n.identifier == (format == .simple ? nil : UInt32(i + 1)))
            #expect(n.expiry == (format == .simple ? nil : (i == 1 ? 1_900_000_000 : 0)))
            #expect(n.priority == (format == .frame ? (i == 1 ? 5 : 10) : nil))
        }
        // The proof: one deliberately invalid notification (empty token), rejected with status 2.
        #expect(await f.gateway.waitForRejections(count: 1))
        #expect(f.gateway.rejections.map(\.response.status) == [.missingDeviceToken])
    }

    @Test func anInvalidTokenInAStreamOf1000() async throws {
        let f = try BinaryFixture { $0.invalidTokens = [BinaryFixture.token(500)] }
        defer { f.gateway.stop() }
        let transport = try f.transport()
        try await transport.start()
        let batch = (1...1000).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes[499] == .tokenInvalid(since: nil, reason: "8 Invalid token"))
        let others = outcomes.enumerated().filter { $0.offset != 499 }
        #expect(others.allSatisfy { $0.element.isDelivered })
        #expect(outcomes[0].evidence?.contains("rejected a later notification") == true)
        #expect(outcomes[999].evidence?.contains("proof notification") == true)
        // Exactly once each, in order, the invalid one never accepted.
        #expect(f.receivedTokens == batch.map(\.token).filter { $0 != BinaryFixture.token(500) })
    }

    @Test func anInvalidTokenInSimpleFormatIsFoundOneByOne() async throws {
        let f = try BinaryFixture { $0.invalidTokens = [BinaryFixture.token(5)] }
        defer { f.gateway.stop() }
        let transport = try f.transport(["format": "simple"])
        try await transport.start()
        let batch = (1...8).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        // Command 0 carries no identifier: the error names nothing, so the eight are written
        // again one at a time, each proven alone; 1–4 arrive twice (at least once).
        #expect(outcomes[4] == .tokenInvalid(since: nil, reason: "8 Invalid token"))
        #expect(outcomes.enumerated().allSatisfy { $0.offset == 4 || $0.element.isDelivered })
        let tokens = batch.map(\.token)
        #expect(f.receivedTokens == Array(tokens[0..<4]) + Array(tokens[0..<4]) + Array(tokens[5...]))
    }

    @Test func aShutdownMidStreamResendsWhatFollowedTheLastGoodOne() async throws {
        let f = try BinaryFixture { $0.shutdownAfter = 300 }
        defer { f.gateway.stop() }
        let transport = try f.transport()
        try await transport.start()
        let batch = (1...1000).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes.allSatisfy { $0.isDelivered })
        #expect(outcomes[299].evidence?.contains("shutdown (status 10)") == true)
        #expect(f.receivedTokens == batch.map(\.token))
        #expect(await f.gateway.waitForRejections(count: 4))
        #expect(f.gateway.rejections.map(\.response.status) == [.shutdown, .shutdown, .shutdown, .missingDeviceToken])
    }

    @Test func aDroppedConnectionLosesNothing() async throws {
        let f = try BinaryFixture {
            $0.dropAfter = 250
            $0.dropConnections = 1
        }
        defer { f.gateway.stop() }
        let transport = try f.transport()
        try await transport.start()
        let batch = (1...1000).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(f.gateway.dropCount == 1)
        #expect(outcomes.allSatisfy { $0.isDelivered })
        // The dropped connection proved nothing: its 250 are sent again, then all 1000 in order.
        let received = f.receivedTokens
        #expect(received.count == 1250)
        #expect(Array(received.prefix(250)) == batch.prefix(250).map(\.token))
        #expect(Array(received.suffix(1000)) == batch.map(\.token))
    }

    @Test func aCleanShutdownProvesTheTail() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        // No proof until shutdown: only the shutdown can settle these (the warm-ups spent the
        // proofs allowed for an hour).
        let transport = try f.transport(["proofInterval": "1h"])
        try await transport.start()
        try await spendProofBudget(transport, gateway: f.gateway)
        let batch = (1...200).map { BinaryFixture.delivery($0) }
        async let outcomes = transport.deliver(batch)
        #expect(await f.gateway.waitForNotifications(count: 200))
        #expect(f.gateway.rejections.isEmpty)  // written, accepted, not yet proven
        await transport.shutdown()
        let settled = await outcomes
        #expect(settled.allSatisfy { $0.evidence?.contains("proof notification") == true })
        #expect(f.receivedTokens == batch.map(\.token))
        // (The gateway records its answer just after sending it.)
        #expect(await f.gateway.waitForRejections(count: 1))
        #expect(f.gateway.rejections.map(\.response.status) == [.missingDeviceToken])
        // After shutdown nothing more is taken.
        let late = await transport.deliver([BinaryFixture.delivery(9999)])
        if case .retry = late[0] {} else { Issue.record("expected a retry after shutdown, got \(late)") }
    }

    @Test func aGatewayThatNeverAnswersTheProofCostsBoundedTime() async throws {
        let f = try BinaryFixture { $0.answersErrors = false }
        defer { f.gateway.stop() }
        let transport = try f.transport(["timeout": "300ms", "proofInterval": 0])
        try await transport.start()
        let batch = (1...3).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        // Never proven: written on three connections, then handed back for a later retry.
        for outcome in outcomes {
            guard case .retry(_, let reason) = outcome else { Issue.record("expected a retry, got \(outcome)"); continue }
            #expect(reason.contains("lost 3 times before it proved the notification (no answer to the proof notification"))
        }
        #expect(f.receivedTokens == Array(repeating: batch.map(\.token), count: 3).flatMap { $0 })
    }

    @Test func aGatewayThatShutsDownBeforeAcceptingAnythingCannotHoldNotifications() async throws {
        let f = try BinaryFixture { $0.shutdownAfter = 0 }
        defer { f.gateway.stop() }
        let transport = try f.transport()
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(1)])
        await transport.shutdown()
        guard case .retry(_, let reason) = outcomes[0] else { Issue.record("expected a retry, got \(outcomes)"); return }
        #expect(reason.contains("status 10 and proved nothing"))
        #expect(f.gateway.received.isEmpty)
        #expect(f.gateway.connectionCount == 3)
    }

    @Test(.timeLimit(.minutes(1)))
    func aThousandUnprovenAreProvenWithoutWaitingForTheInterval() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(["proofInterval": "1h"])
        try await transport.start()
        try await spendProofBudget(transport, gateway: f.gateway)
        // Another proof within the hour: held while fewer than 1,000 wait, not for 1,000.
        let outcomes = await transport.deliver((2...1001).map { BinaryFixture.delivery($0) })
        #expect(outcomes.allSatisfy { $0.evidence?.contains("proof notification") == true })
        await transport.shutdown()
    }

    @Test func statusesMapToOutcomes() async throws {
        let f = try BinaryFixture {
            $0.tokenFaults = [BinaryFixture.token(2): .processingError, BinaryFixture.token(3): APNsBinaryStatus(rawValue: 255),
                              BinaryFixture.token(4): .missingTopic]
        }
        defer { f.gateway.stop() }
        let transport = try f.transport()
        try await transport.start()
        let batch = (1...5).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes[0].isDelivered && outcomes[4].isDelivered)
        #expect(outcomes[1] == .retry(after: nil, reason: "1 Processing error"))
        #expect(outcomes[2] == .retry(after: nil, reason: "255 None (unknown)"))
        #expect(outcomes[3] == .rejected(reason: "3 Missing topic"))
        #expect(f.receivedTokens == [BinaryFixture.token(1), BinaryFixture.token(5)])
    }

    @Test func payloadLimitsAtTheByte() async throws {
        func payload(_ size: Int) -> [UInt8] {
            let head = #"{"aps":{},"p":""#
            return Array((head + String(repeating: "x", count: size - head.utf8.count - 2) + #""}"#).utf8)
        }
        let f = try BinaryFixture { $0.framePayloadLimit = 300 }
        defer { f.gateway.stop() }
        let transport = try f.transport(["maxPayload": 256])
        try await transport.start()
        let outcomes = await transport.deliver([BinaryFixture.delivery(1, payload: payload(256)),
                                                BinaryFixture.delivery(2, payload: payload(257))])
        await transport.shutdown()
        #expect(outcomes[0].isDelivered)
        #expect(outcomes[1] == .rejected(reason: "7 Invalid payload size: the payload is 257 bytes; maxPayload is 256 (not sent)"))
        #expect(f.receivedTokens == [BinaryFixture.token(1)])

        // The gateway's own limit: 300 accepted, 301 refused with status 7.
        let wide = try f.transport(["maxPayload": 2048])
        try await wide.start()
        let gateway = await wide.deliver([BinaryFixture.delivery(3, payload: payload(300)), BinaryFixture.delivery(4, payload: payload(301))])
        await wide.shutdown()
        #expect(gateway[0].isDelivered)
        #expect(gateway[1] == .rejected(reason: "7 Invalid payload size"))
    }

    @Test func aTokenThatIsNot32BytesIsNeverWritten() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport()
        try await transport.start()
        var short = BinaryFixture.delivery(1)
        short.token = String(repeating: "ab", count: 16)
        let outcomes = await transport.deliver([short, BinaryFixture.delivery(2)])
        await transport.shutdown()
        if case .rejected(let reason) = outcomes[0] { #expect(reason.hasPrefix("5 Invalid token size")) } else { Issue.record("\(outcomes)") }
        #expect(outcomes[1].isDelivered)
        #expect(f.receivedTokens == [BinaryFixture.token(2)])
    }

    @Test func severalConnectionsShareABatchInOrder() async throws {
        let f = try BinaryFixture()
        defer { f.gateway.stop() }
        let transport = try f.transport(["connections": 3])
        try await transport.start()
        let batch = (1...300).map { BinaryFixture.delivery($0) }
        let outcomes = await transport.deliver(batch)
        await transport.shutdown()
        #expect(outcomes.allSatisfy { $0.isDelivered })
        #expect(Set(f.receivedTokens) == Set(batch.map(\.token)) && f.receivedTokens.count == 300)
        #expect(Set(f.gateway.received.map(\.connection)).count == 3)
    }
}
