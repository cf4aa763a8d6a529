import Foundation
import HeraldTestKit
import Testing

/// `herald-bench apns-broadcast` end to end with tiny counts against the `herald` simulator beside
/// it (a real process with its management port, TLS, HTTP/2). No speed is asserted: the figures
/// must be there, and nothing may fail.
@Suite(.serialized) struct BroadcastBenchTests {
    static var bench: String { PackagePaths.executable("herald-bench") }

    @Test func printsItsFiguresAndNothingFails() async throws {
        let work = try TemporaryDirectory()
        defer { work.remove() }
        let run = try await Run.program(Self.bench, ["apns-broadcast", "--tokens", "300", "--broadcasts", "20", "--channels", "3",
                                                     "--work", work.path, "--json"],
                                        environment: ["HERALD": PackagePaths.heraldBinary])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        let figures = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)")
        #expect((figures["update_per_s"] as? Double).map { $0 > 0 } == true, "\(figures)")
        #expect((figures["h2load_per_s"] as? Double).map { $0 > 0 } == true, "\(figures)")
        #expect((figures["broadcast_ms_p50"] as? Double).map { $0 > 0 } == true, "\(figures)")
        #expect((figures["channel_create_ms_p50"] as? Double).map { $0 > 0 } == true, "\(figures)")
        #expect(figures["update_failures"] as? Int == 0 && figures["broadcast_failures"] as? Int == 0, "\(figures)")
        let bad = try await Run.program(Self.bench, ["apns-broadcast", "--engine", "h2o"])
        #expect(bad.status == 2 && bad.stderr.contains("--engine: expected curl or nghttp2"), "\(bad.stderr)")
    }
}
