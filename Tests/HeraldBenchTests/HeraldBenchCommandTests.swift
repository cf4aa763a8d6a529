import Foundation
import HeraldTestKit
import Testing

/// `herald-bench` as a binary: its subcommands, and a benchmark run end to end against the
/// `herald` beside it (a real simulator process, a real TLS connection).
@Suite struct HeraldBenchCommandTests {
    static var bench: String { PackagePaths.executable("herald-bench") }

    @Test func listsEveryBenchmarkAndAnswersHelp() async throws {
        let overview = try await Run.program(Self.bench, ["--help"])
        #expect(overview.status == 0)
        for name in ["apns-http2", "apns-binary", "crypto", "stream", "stream-http", "stream-client", "stream-hub"] {
            #expect(overview.stdout.contains("\n  \(name) "), "\(name) missing from: \(overview.stdout)")
        }
        let help = try await Run.program(Self.bench, ["apns-binary", "--help"])
        #expect(help.status == 0 && help.stdout.contains("Usage: herald-bench apns-binary [--n N] [--rounds R]"), "\(help.stdout)")
        let bad = try await Run.program(Self.bench, ["apns-binary", "--format", "nope"])
        #expect(bad.status == 2 && bad.stderr.contains("herald-bench apns-binary: --format: expected frame, enhanced or simple"), "\(bad.stderr)")
        let unknown = try await Run.program(Self.bench, ["crypt"])
        #expect(unknown.status == 2 && unknown.stderr.contains("did you mean \"crypto\"?"), "\(unknown.stderr)")
    }

    @Test func theProductionBinaryPointsToIt() async throws {
        let moved = try await Run.herald(["bench", "crypto"])
        #expect(moved.status == 2 && moved.stderr.contains("herald-bench"), "\(moved.stderr)")
        #expect(try await !Run.herald(["--help"]).stdout.contains("bench"))
    }

    /// The hub benchmark checks its own result: every write of every round answered acknowledged.
    @Test func theStreamHubBenchmarkRunsAndReportsBothFigures() async throws {
        let run = try await Run.program(Self.bench, ["stream-hub", "--n", "300", "--rounds", "3", "--batch-size", "100"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("the hub (numbering, writes, write's report, ack waits, acks): "), "\(run.stdout)")
        #expect(run.stdout.contains("reference (same run): framing the event and writing it to the same sinks: "), "\(run.stdout)")
    }

    @Test func aBenchmarkStartsTheHeraldBesideIt() async throws {
        let work = try TemporaryDirectory()
        defer { work.remove() }
        let run = try await Run.program(Self.bench, ["apns-binary", "--n", "1000", "--rounds", "1", "--work", work.path, "--json"],
                                  environment: ["HERALD": PackagePaths.heraldBinary])
        #expect(run.status == 0, "\(run.stderr)")
        let figures = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
        #expect(figures?["n"] as? Int == 1000, "\(run.stdout)")
        #expect((figures?["herald_runs_per_s"] as? [Double])?.count == 1, "\(run.stdout)")
        #expect(figures?["not_delivered"] as? Int == 0, "\(run.stdout)")
    }
}
