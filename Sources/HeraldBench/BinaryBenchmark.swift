import APNsBinaryProtocol
import Dispatch
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCLI
import HeraldCore
import HeraldCrypto
import HeraldTestKit

/// `herald-bench apns-binary`: the apns-binary transport against the binary gateway simulator,
/// next to a raw TLS writer of the same frames (the ceiling) in the same run.
enum BinaryBenchmark {
    static let spec = CommandSpec(
        path: "apns-binary",
        summary: "Benchmark the apns-binary transport against the binary gateway simulator, next to a raw TLS writer.",
        usage: "apns-binary [--n N] [--rounds R] [--format frame|enhanced|simple] [--work DIR] [--json]",
        options: [
            .value("n", "N", "notifications per run (default 200000)"),
            .value("rounds", "R", "runs of each, interleaved; medians are printed (default 3)"),
            .value("format", "FORMAT", "frame (command 2, default), enhanced (1) or simple (0)"),
            .value("work", "DIR", "folder for the test certificates (default var/bench)"),
            .flag("json", "print the figures as one JSON object"),
        ],
        discussion: """
        Starts `herald simulate apns-binary` (mutual TLS) as a separate process, then, in turns:
        the raw writer (one TLS connection, the N frames prepared in one buffer and written with
        SSL_write, then a final invalid frame whose rejection proves the gateway read them all)
        and the transport (one connection, N notifications handed over in batches of 5,000, each
        reported delivered only once proven). Prints notifications/s for both, the ratio and
        CPU time per notification in this process, and the median of the rounds' ratios (each round runs
        both under the same conditions); the target is at least 0.5× the raw writer.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 1000...10_000_000) ?? 200_000
        let rounds = try arguments.int("rounds", command: spec.path, in: 1...20) ?? 3
        let formatName = arguments.value("format") ?? "frame"
        guard let format = APNsBinaryFormat(rawValue: formatName) else {
            throw .usage("--format: expected frame, enhanced or simple", command: spec.path)
        }
        let work = URL(fileURLWithPath: arguments.value("work") ?? "var/bench").standardizedFileURL.path
        do {
            try await run(n: n, rounds: rounds, format: format, work: work, registry: context.registry, console: context.console,
                          json: arguments.flag("json"))
        } catch let error as CLIError {
            throw error
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }

    static let target = 0.5
    static let payload = Array(#"{"aps":{"alert":{"title":"Benchmark","body":"Hello from Herald"},"badge":1}}"#.utf8)
    static let token = [UInt8](repeating: 0xab, count: 32)

    static func run(n: Int, rounds: Int, format: APNsBinaryFormat, work: String, registry: TransportRegistry,
                    console: Console, json: Bool) async throws {
        let certs = work + "/certs"
        try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])
        let executable = try BenchExecutables.herald()
        let port = try Loopback.freePort()
        let simulator = try Subprocess(executable, ["simulate", "apns-binary", "--port", String(port), "--tls-cert", certs + "/server.pem",
                                                    "--tls-key", certs + "/server.key", "--client-ca", certs + "/ca.pem"])
        defer { simulator.stop() }
        try waitForPort(port)

        let identity = try ClientIdentity.load(certificateFile: certs + "/client.pem", keyFile: certs + "/client.key", passphrase: nil)
        let tls = try TLSClientContext(caFile: certs + "/ca.pem", identity: identity)
        var raw: [(rate: Double, cpu: Double)] = []
        var herald: [(rate: Double, cpu: Double, failed: Int)] = []
        for _ in 0..<rounds {
            raw.append(try await rawWriter(n: n, format: format, port: port, context: tls))
            herald.append(try await transportRun(n: n, format: format, port: port, certs: certs, work: work, registry: registry))
        }
        let rawRate = median(raw.map(\.rate)), rawCPU = median(raw.map(\.cpu))
        let rate = median(herald.map(\.rate)), cpu = median(herald.map(\.cpu))
        let failed = herald.map(\.failed).reduce(0, +)
        // Each round pairs a raw run with a transport run under the same conditions: the
        // median of those ratios is steadier on a shared machine than a ratio of medians.
        let ratio = median(zip(herald, raw).map { $0.rate / $1.rate })
        if json {
            console.out(JSONValue.object([
                "n": .number(Double(n)), "rounds": .number(Double(rounds)), "format": .string(format.rawValue),
                "raw_per_s": .number(rawRate.rounded()), "raw_cpu_us_per_notification": .number((rawCPU * 100).rounded() / 100),
                "herald_per_s": .number(rate.rounded()), "herald_cpu_us_per_notification": .number((cpu * 100).rounded() / 100),
                "herald_runs_per_s": .array(herald.map { .number($0.rate.rounded()) }), "raw_runs_per_s": .array(raw.map { .number($0.rate.rounded()) }),
                "ratio": .number((ratio * 1000).rounded() / 1000), "ratios": .array(zip(herald, raw).map { .number((($0.rate / $1.rate) * 1000).rounded() / 1000) }), "target_ratio": .number(target), "met": .bool(ratio >= target),
                "not_delivered": .number(Double(failed)),
            ]).jsonString)
            return
        }
        console.out("apns-binary, format \(format.rawValue), 1 connection, \(n) notifications, \(rounds) rounds (medians), gateway `herald simulate apns-binary`:")
        console.out("  raw TLS writer  \(rawRate.fixed(0, width: 9)) notifications/s  \(rawCPU.fixed(2)) µs CPU per notification"
                    + "  (runs: \(raw.map { $0.rate.fixed(0) }.joined(separator: ", ")))")
        console.out("  herald          \(rate.fixed(0, width: 9)) notifications/s  \(cpu.fixed(2)) µs CPU per notification"
                    + "  (runs: \(herald.map { $0.rate.fixed(0) }.joined(separator: ", ")))" + (failed > 0 ? "  \(failed) not delivered" : ""))
        console.out("  ratio \(ratio.fixed(2))× the raw writer, median of the rounds' ratios (\(zip(herald, raw).map { ($0.rate / $1.rate).fixed(2) }.joined(separator: ", "))); "
                    + "target ≥ \(target.fixed(2))×: \(ratio >= target ? "met" : "not met")")
    }

    static func median(_ values: [Double]) -> Double {
        let s = values.sorted()
        return s.isEmpty ? 0 : s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    /// One TLS connection writing the prepared frames and a final invalid one, then reading the
    /// gateway's answer to it (which proves every frame before it was read and accepted).
    static func rawWriter(n: Int, format: APNsBinaryFormat, port: Int, context: TLSClientContext) async throws -> (rate: Double, cpu: Double) {
        var buffer: [UInt8] = []
        buffer.reserveCapacity((n + 1) * APNsBinaryFrameEncoder.length(format: format, tokenCount: 32, payloadCount: payload.count))
        for i in 0..<n {
            APNsBinaryFrameEncoder.append(to: &buffer, format: format, token: token, payload: payload,
                                          identifier: UInt32(i + 1), expiry: 0, priority: 10)
        }
        APNsBinaryFrameEncoder.append(to: &buffer, format: format == .simple ? .enhanced : format, token: [UInt8](), payload: Array("{}".utf8),
                                      identifier: UInt32(n + 1), expiry: 0, priority: 10)
        let prepared = buffer
        let result: Result<(Double, Double), any Error> = await withCheckedContinuation { c in
            OSThread.start(name: "bench-raw-writer") {
                c.resume(returning: Result {
                    let cpuBefore = processCPUSeconds()
                    let start = DispatchTime.now().uptimeNanoseconds
                    let connection = try TLSClient.connect(host: "127.0.0.1", port: port, context: context, timeout: 10)
                    defer { connection.shutdown() }
                    var offset = 0
                    while offset < prepared.count {
                        let r = prepared.withUnsafeBytes { connection.write(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
                        guard case .bytes(let k) = r else { throw APNsBenchmark.Failure(description: "raw writer: write failed: \(r)") }
                        offset += k
                    }
                    var answer: [UInt8] = []
                    var six = [UInt8](repeating: 0, count: 6)
                    while answer.count < 6 {
                        let r = six.withUnsafeMutableBytes { connection.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<(6 - answer.count)])) }
                        guard case .bytes(let k) = r else { throw APNsBenchmark.Failure(description: "raw writer: no answer: \(r)") }
                        answer += six[0..<k]
                    }
                    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
                    guard let response = APNsBinaryErrorResponse(bytes: answer), response.identifier == UInt32(n + 1) else {
                        throw APNsBenchmark.Failure(description: "raw writer: the gateway answered \(answer), not the final frame's rejection")
                    }
                    return (Double(n) / seconds, (processCPUSeconds() - cpuBefore) / Double(n) * 1e6)
                })
            }
        }
        return try result.get()
    }

    /// The transport on one connection: `n` notifications in batches of 5,000, 8 batches in flight.
    static func transportRun(n: Int, format: APNsBinaryFormat, port: Int, certs: String, work: String,
                             registry: TransportRegistry) async throws -> (rate: Double, cpu: Double, failed: Int) {
        let config = """
        {"apps": {"com.example.app": {"routes": ["legacy"]}},
         "transports": {"legacy": {"type": "apns-binary", "environment": "sandbox", "endpoint": "127.0.0.1:\(port)",
                                   "caFile": "\(certs)/ca.pem", "certFile": "\(certs)/client.pem", "keyFile": "\(certs)/client.key",
                                   "format": "\(format.rawValue)", "feedbackInterval": 0}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(config.utf8), baseDirectory: work, registry: registry, environment: [:])
        let transport = try registry.makeTransport(configuration.transports["legacy"]!,
                                                   context: TransportContext(logger: Logger(label: "bench", level: .error)))
        try await transport.start()
        let content = NotificationContent(alert: .fields(Alert(title: "Benchmark", body: "Hello from Herald")), badge: 1)
        let hex = BinaryHex.encode(token)
        let deliveries = (0..<n).map { i in
            Delivery(id: Int64(i), notificationID: "bench", app: "com.example.app", topic: "com.example.app", token: hex,
                     user: nil, transport: "legacy", content: content, payload: RenderedPayload(body: payload))
        }
        // Batches are cut before the clock starts, as the raw writer's buffer is prepared.
        let batches = stride(from: 0, to: n, by: 5000).map { Array(deliveries[$0..<min($0 + 5000, n)]) }
        let cpuBefore = processCPUSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        let failed = await deliverInBatches(transport, count: batches.count, inFlight: 8) { batches[$0] }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = processCPUSeconds() - cpuBefore
        await transport.shutdown()
        return (Double(n) / seconds, cpu / Double(n) * 1e6, failed)
    }
}
