import Foundation
import HeraldTestKit
import Testing

/// `herald-bench webpush` and `herald-bench fcm` run end to end with tiny counts against the
/// `herald` simulators beside them (real processes, TLS, HTTP/2) and print their figure lines.
/// No speed is asserted: a debug build on a shared machine measures nothing; the figures must be there.
@Suite(.serialized) struct WebPushFCMBenchTests {
    static var bench: String { PackagePaths.executable("herald-bench") }

    /// The number before `unit` on the line that starts with `label` (after spaces).
    func figure(_ output: String, _ label: String, _ unit: String) -> Double? {
        guard let line = output.split(separator: "\n").first(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(label) }),
              let range = line.range(of: unit) else { return nil }
        let before = line[..<range.lowerBound].split(separator: " ").last.map(String.init) ?? ""
        return Double(before.trimmingCharacters(in: CharacterSet(charactersIn: "()×")))
    }

    @Test func bothAreListed() async throws {
        let overview = try await Run.program(Self.bench, ["--help"])
        #expect(overview.status == 0)
        #expect(overview.stdout.contains("\n  webpush ") && overview.stdout.contains("\n  fcm "), "\(overview.stdout)")
        let bad = try await Run.program(Self.bench, ["fcm", "--n", "5"])
        #expect(bad.status == 2 && bad.stderr.contains("--n"), "\(bad.stderr)")
    }

    @Test func webpushPrintsItsFigures() async throws {
        let work = try TemporaryDirectory()
        defer { work.remove() }
        let run = try await Run.program(Self.bench, ["webpush", "--n", "60", "--subscriptions", "7", "--streams", "10", "--seconds", "1", "--work", work.path],
                                  environment: ["HERALD": PackagePaths.heraldBinary])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        let rate = figure(run.stdout, "herald webpush", "notifications/s")
        let cpu = figure(run.stdout, "herald webpush", "µs CPU per notification")
        #expect(rate.map { $0 > 0 } == true && cpu.map { $0 > 0 } == true, "\(run.stdout)")
        #expect(figure(run.stdout, "one ECDH", "µs").map { $0 > 0 } == true, "\(run.stdout)")
        #expect(figure(run.stdout, "one key generation", "µs").map { $0 > 0 } == true, "\(run.stdout)")
        #expect(run.stdout.contains("one ECDH + one key generation") && run.stdout.contains("target: CPU per notification ≤ 2×"), "\(run.stdout)")
        // A delivery the simulator refused (it decrypts each one) makes the run fail.
        #expect(!run.stdout.contains("not delivered"), "\(run.stdout)")
    }

    @Test func fcmPrintsItsFigures() async throws {
        let work = try TemporaryDirectory()
        defer { work.remove() }
        let run = try await Run.program(Self.bench, ["fcm", "--n", "200", "--streams", "10", "--work", work.path],
                                  environment: ["HERALD": PackagePaths.heraldBinary])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        #expect(figure(run.stdout, "h2load", "req/s").map { $0 > 0 } == true, "\(run.stdout)")
        #expect(figure(run.stdout, "herald fcm", "notifications/s").map { $0 > 0 } == true, "\(run.stdout)")
        #expect(figure(run.stdout, "herald fcm", "µs CPU per notification").map { $0 > 0 } == true, "\(run.stdout)")
        #expect(figure(run.stdout, "herald apns-http2", "µs CPU per notification").map { $0 > 0 } == true, "\(run.stdout)")
        #expect(run.stdout.contains("× h2load (target ≥ 0.6×)") && run.stdout.contains("the apns-http2 nghttp2 engine's (target ≤ 1.2×)"), "\(run.stdout)")
        #expect(!run.stdout.contains("not delivered"), "\(run.stdout)")
    }
}
