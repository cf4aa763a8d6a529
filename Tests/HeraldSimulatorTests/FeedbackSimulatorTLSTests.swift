import Foundation
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
import Testing

@Suite("Feedback service over mutual TLS")
struct FeedbackSimulatorTLSTests {
    let a = BinaryWire.token(0xa5), b = BinaryWire.token(0x5a)

    @Test func opensslClientReadsTuplesThenTheListIsEmpty() async throws {
        let sim = try BinarySimulatorHarness.feedback(deadTokens: [(BinaryWire.hex(a), 1_500_000_000), (BinaryWire.hex(b), 1_500_000_001)])
        defer { sim.stop() }
        let first = try await OpenSSLClient.run(port: sim.port, input: [])
        let expected: [UInt8] = BinaryWire.u32(1_500_000_000) + [0, 32] + a + BinaryWire.u32(1_500_000_001) + [0, 32] + b
        #expect(first.stdout == expected, "s_client stderr: \(first.stderr)")
        let second = try await OpenSSLClient.run(port: sim.port, input: [])
        #expect(second.stdout.isEmpty)
        #expect(sim.deliveries.map(\.entries.count) == [2, 0])
        #expect(sim.deliveries.first?.client?.uid == "com.example.app")
    }

    @Test func swiftClientReadsUntilTheServiceCloses() async throws {
        let sim = try BinarySimulatorHarness.feedback()
        defer { sim.stop() }
        sim.addDeadToken(a, time: 77)
        let client = try TLSTestClient(port: sim.port)
        let (bytes, end) = client.readToEnd()
        #expect(end == .closed)
        let tuples = try #require(BinaryWire.decodeFeedback(bytes))
        #expect(tuples.count == 1)
        #expect(tuples.first?.time == 77)
        #expect(tuples.first?.token == a)
        #expect(sim.pending.isEmpty)
    }

    @Test func clientWithoutCertificateIsRefusedAndTheListIsKept() async throws {
        let sim = try BinarySimulatorHarness.feedback(deadTokens: [(BinaryWire.hex(a), 1)])
        defer { sim.stop() }
        let result = try await OpenSSLClient.run(port: sim.port, input: [], certificate: nil, key: nil)
        #expect(result.stdout.isEmpty)
        #expect(await sim.waitForRefusals(count: 1))
        #expect(sim.pending.count == 1)
        #expect(sim.deliveries.isEmpty)
    }
}
