import Foundation
import HeraldSimulator
import HeraldTestKit
import Testing

/// The test kit starts all three simulators on port 0, side by side, in one process.
@Suite("Test kit: all simulators")
struct HTTP2AllSimulatorsTests {
    @Test func allThreeStartOnPortZero() async throws {
        let http2 = try HTTP2SimulatorHarness.tokenAuth()
        defer { http2.stop() }
        let feedback = try BinarySimulatorHarness.feedback(deadTokens: [(sampleToken, 1_767_225_600)])
        defer { feedback.stop() }
        let gateway = try BinarySimulatorHarness.gateway(feedback: feedback)
        defer { gateway.stop() }
        let ports = [http2.port, gateway.port, feedback.port]
        #expect(ports.allSatisfy { $0 > 0 })
        #expect(Set(ports).count == 3)
        let r = try await Curl.one(http2.url(token: sampleToken), ["-H", "authorization: bearer \(try http2.jwt())",
                                                              "-H", "apns-topic: com.example.app", "--data-binary", samplePayload],
                             caFile: http2.certificates.caFile)
        #expect(r.status == 200)
        #expect(http2.simulator.received.count == 1)
    }
}
