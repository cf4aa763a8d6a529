import Foundation
import HeraldTestKit
import Testing

/// `herald-bench china` runs end to end with tiny counts against the `herald simulate` beside it
/// (real processes, TLS, HTTP/2) and prints a figure line per vendor. No speed is asserted: a
/// debug build on a shared machine measures nothing; the figures must be there.
@Suite(.serialized) struct ChinaPushBenchTests {
    static var bench: String { PackagePaths.executable("herald-bench") }

    @Test func everyVendorPrintsItsFigures() async throws {
        let work = try TemporaryDirectory()
        defer { work.remove() }
        let run = try await Run.program(Self.bench, ["china", "--n", "300", "--streams", "10", "--work", work.path],
                                        environment: ["HERALD": PackagePaths.heraldBinary])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        for vendor in ["hms", "xiaomi", "oppo", "vivo"] {
            let line = run.stdout.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(vendor + " ") }
            #expect(line?.contains("req/s") == true && line?.contains("notifications/s") == true && line?.contains("µs CPU per notification") == true,
                    "\(vendor): \(run.stdout)")
            #expect(line?.contains("not delivered") == false, "\(run.stdout)")
        }
        let bad = try await Run.program(Self.bench, ["china", "--vendor", "meizu"])
        #expect(bad.status == 2 && bad.stderr.contains("--vendor"), "\(bad.stderr)")
    }
}
