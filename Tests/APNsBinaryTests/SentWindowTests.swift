import APNsBinaryProtocol
import HeraldAPNs
import HeraldCore
import Testing
@testable import HeraldAPNsBinary

/// What one answer of the gateway proves about the window, without sockets.
@Suite struct SentWindowTests {
    let batch = BinaryBatch(count: 10)

    func window(_ n: Int) -> SentWindow {
        var w = SentWindow(connection: 1)
        for slot in 0..<n {
            _ = w.append(BinaryFrame(batch: batch, slot: slot, token: [UInt8](repeating: 1, count: 32), payload: [1], expiry: 0, priority: 10))
        }
        return w
    }

    func response(_ status: UInt8, _ id: UInt32) -> APNsBinaryErrorResponse {
        APNsBinaryErrorResponse(bytes: [8, status, 0, 0, 0, UInt8(id)])!
    }

    @Test func anErrorProvesWhatCameBeforeAndResendsWhatCameAfter() {
        var w = window(5)
        let r = w.resolve(response(8, 3), identified: true)
        #expect(r.delivered.map(\.slot) == [0, 1])
        #expect(r.failed?.frame.slot == 2 && r.failed?.outcome == .tokenInvalid(since: nil, reason: "8 Invalid token"))
        #expect(r.resend.map(\.slot) == [3, 4])
        #expect(w.isEmpty)
    }

    @Test func theProofSettlesEverything() {
        var w = window(4)
        let proof = w.appendProof()
        #expect(proof == 5)
        let r = w.resolve(response(2, proof), identified: true)
        #expect(r.delivered.map(\.slot) == [0, 1, 2, 3] && r.failed == nil && r.resend.isEmpty)
        #expect(r.evidence.contains("proof notification (identifier 5, status 2)"))
    }

    @Test func aShutdownNamesTheLastGoodOneOrNothing() {
        var w = window(4)
        let r = w.resolve(response(10, 2), identified: true)
        #expect(r.delivered.map(\.slot) == [0, 1] && r.failed == nil && r.resend.map(\.slot) == [2, 3])
        var none = window(3)
        let zero = none.resolve(response(10, 0), identified: true)
        #expect(zero.delivered.isEmpty && zero.resend.map(\.slot) == [0, 1, 2])
    }

    @Test func anUnknownIdentifierProvesNothing() {
        var w = window(3)
        let r = w.resolve(response(8, 200), identified: true)
        #expect(r.delivered.isEmpty && r.failed == nil && r.resend.map(\.slot) == [0, 1, 2])
        #expect(r.resend.allSatisfy { !$0.isolate })
        var simple = window(3)
        let s = simple.resolve(response(8, 0), identified: false)
        #expect(s.resend.count == 3 && s.resend.allSatisfy(\.isolate))
    }

    @Test func aLostConnectionCountsAgainstEachUnprovenNotification() {
        var w = window(2)
        let lost = w.lost()
        #expect(lost.map(\.losses) == [1, 1] && w.isEmpty)
    }

    @Test func statusTable() {
        #expect(BinaryStatusMapping.outcome(for: .invalidPayloadSize) == .rejected(reason: "7 Invalid payload size"))
        #expect(BinaryStatusMapping.outcome(for: .protocolError) == .rejected(reason: "128 Protocol error"))
        #expect(BinaryStatusMapping.outcome(for: .processingError) == .retry(after: nil, reason: "1 Processing error"))
        #expect(BinaryStatusMapping.setupProblem("error:0A000418:SSL routines::tlsv1 alert unknown ca") != nil)
        #expect(BinaryStatusMapping.setupProblem("socket error: Connection refused") == nil)
    }

    @Test func theProofBudgetAllowsABurstThenPaces() {
        var budget = ProofBudget(interval: 3600, burst: 2, notificationsPerProof: 1000)
        let start = ContinuousClock.now
        #expect(budget.due() <= ContinuousClock.now)
        budget.spend()
        #expect(budget.due() <= ContinuousClock.now)
        budget.spend()
        let next = budget.due()
        #expect(next > start + .seconds(3500) && next <= ContinuousClock.now + .seconds(3600))
        budget.wrote(999)
        #expect(budget.due() > ContinuousClock.now + .seconds(1))
        budget.wrote(1)
        #expect(budget.due() <= ContinuousClock.now)
    }
}
