import Dispatch
import FoundationEssentials
import Glibc
import HeraldCLI
import HeraldCore
import HeraldCrypto

/// `herald-bench webpush`: the `webpush` transport against `herald simulate webpush`, next to
/// the cost of one P-256 ECDH and one P-256 key generation (what RFC 8291 needs per message).
enum WebPushBenchCommand {
    static let spec = CommandSpec(
        path: "webpush",
        summary: "Benchmark the webpush transport against herald simulate webpush, next to one ECDH + one key generation.",
        usage: "webpush [--n N] [--subscriptions K] [--streams S] [--engine nghttp2|curl] [--seconds S] [--work DIR]",
        options: [
            .value("n", "N", "notifications to send (default 20000)"),
            .value("subscriptions", "K", "distinct subscriptions they go to, round robin (default 100)"),
            .value("streams", "S", "streams in flight on the connection (default 100)"),
            .value("engine", "E", "the transport's HTTP/2 engine: nghttp2 (default) or curl"),
            .value("seconds", "S", "seconds of openssl speed ecdhp256 (default 3)"),
            .value("work", "DIR", "folder for certificates and the simulator's files (default var/bench-webpush)"),
        ],
        discussion: """
        Starts `herald simulate webpush` (another process: its decryption is not counted), builds
        the webpush transport from a configuration (VAPID, TLS to the simulator's CA, one HTTP/2
        connection), renders N notifications as the daemon does at accept time and hands them to
        the transport. Prints notifications/s and this process's CPU (getrusage RUSAGE_SELF) per
        notification, next to one ECDH (openssl speed -seconds S ecdhp256) plus one P-256 key
        generation (P256EphemeralKey.generate in a loop, in this process: EVP_PKEY_generate on a
        prepared context and the public point's export, what each message needs; OpenSSL 3.0's
        speed has no EC key-generation figure), and the ratio; the target is at most 2×.
        Needs openssl.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 10...10_000_000) ?? 20_000
        let subscriptions = try arguments.int("subscriptions", command: spec.path, in: 1...100_000) ?? 100
        let streams = try arguments.int("streams", command: spec.path, in: 1...10_000) ?? 100
        let seconds = try arguments.int("seconds", command: spec.path, in: 1...60) ?? 3
        let engine = arguments.value("engine") ?? "nghttp2"
        guard ["nghttp2", "curl"].contains(engine) else { throw .usage("--engine is nghttp2 or curl, not \"\(engine)\"", command: spec.path) }
        let work = URL(fileURLWithPath: arguments.value("work") ?? "var/bench-webpush").standardizedFileURL.path
        do {
            let bench = WebPushBenchmark(n: n, subscriptions: min(subscriptions, n), streams: streams, engine: engine, seconds: seconds,
                                         work: work, registry: context.registry, console: context.console)
            try await bench.run()
        } catch let error as CLIError {
            throw error
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }
}

/// The moving parts of `herald-bench webpush`.
struct WebPushBenchmark {
    let n: Int
    let subscriptions: Int
    let streams: Int
    let engine: String
    let seconds: Int
    let work: String
    let registry: TransportRegistry
    let console: Console

    /// The target: CPU per notification at most this many times one ECDH + one key generation.
    static let targetRatio = 2.0

    func run() async throws {
        guard let openssl = which("openssl") else { throw APNsBenchmark.Failure(description: "openssl is not installed (run scripts/bootstrap.sh)") }
        let certs = work + "/certs"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])

        // The references: openssl's ECDH, and key generation through HeraldCrypto in this process.
        let ecdh = try CryptoBenchmark.opensslFields(try shell(openssl, ["speed", "-mr", "-seconds", String(seconds), "ecdhp256"]), prefix: "+F5:")
        guard ecdh.count >= 4, let ecdhPerSecond = Double(ecdh[3]), ecdhPerSecond > 0 else {
            throw APNsBenchmark.Failure(description: "cannot read openssl speed ecdhp256: \(ecdh)")
        }
        let keygenMicroseconds = try Self.keyGenerationMicroseconds(seconds: Double(seconds))
        let ecdhMicroseconds = 1e6 / ecdhPerSecond
        let referenceMicroseconds = ecdhMicroseconds + keygenMicroseconds

        let simulator = try SimulatorProcess.start(
            ["simulate", "webpush", "--tls-cert", certs + "/server.pem", "--tls-key", certs + "/server.key", "--seed", "bench",
             "--subscriptions-out", work + "/subscriptions.jsonl", "--count", String(subscriptions)],
            log: work + "/simulator.txt")
        defer { simulator.stop() }
        let lines = try String(contentsOfFile: work + "/subscriptions.jsonl", encoding: .utf8).split(separator: "\n").map(String.init)
        guard lines.count == subscriptions else {
            throw APNsBenchmark.Failure(description: "the simulator wrote \(lines.count) subscriptions, not \(subscriptions)")
        }

        let key = try P256PrivateKey.generate()
        let config = """
        {"apps": {"com.example.web": {"routes": ["web"]}},
         "transports": {"web": {"type": "webpush", "vapidKey": "\(Base64URL.encode(key.rawRepresentation))", "subject": "mailto:bench@example.com",
                                "allowedEndpoints": ["127.0.0.1"], "caFile": "\(certs)/ca.pem", "connections": 1,
                                "maxConcurrentStreams": \(streams), "timeout": "60s", "engine": "\(engine)"}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(config.utf8), baseDirectory: work, registry: registry, environment: [:])
        let spec = configuration.transports["web"]!
        let tokens = try lines.map { try spec.configuration.address(.token($0), attributes: DeviceAttributes()).token }
        // Rendered as the daemon renders at accept time (not measured: it is not the transport's work).
        let content = NotificationContent(title: "Benchmark", body: "Hello from Herald")
        let deliveries = try (0..<n).map { i in
            var d = Delivery(id: Int64(i), notificationID: "bench-\(i)", app: "com.example.web", topic: "com.example.web",
                             token: tokens[i % tokens.count], user: nil, transport: "web", content: content)
            d.payload = try spec.configuration.render(content, context: d.renderContext)
            d.acceptedAt = Date()
            return d
        }
        let transport = try registry.makeTransport(spec, context: TransportContext(logger: Logger(label: "bench", level: .error)))
        try await transport.start()
        // Warm up: the connection, the VAPID JWT of this origin.
        let warm = await transport.deliver(Array(deliveries.prefix(min(streams, n))))
        guard warm.allSatisfy({ if case .delivered = $0 { return true }; return false }) else {
            await transport.shutdown()
            throw APNsBenchmark.Failure(description: "the warm-up was not delivered: \(warm.first { if case .delivered = $0 { return false }; return true }!)")
        }
        // One batch at a time: the transport sends one batch per push service at once and defers
        // the deliveries of another batch to the same service while one is being answered (as the
        // daemon's workers see it), so a batch is large enough to keep the streams full.
        let batch = max(streams * 10, 1000)
        let cpuBefore = processCPUSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        let failures = await deliverInBatches(transport, count: (n + batch - 1) / batch, inFlight: 1) { i in
            Array(deliveries[i * batch..<min((i + 1) * batch, n)])
        }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpuMicroseconds = (processCPUSeconds() - cpuBefore) / Double(n) * 1e6
        await transport.shutdown()

        let ratio = cpuMicroseconds / referenceMicroseconds
        console.out("webpush, \(engine) engine, 1 connection, \(streams) streams, \(n) notifications to \(subscriptions) subscriptions, server herald simulate webpush (another process):")
        console.out("  herald webpush      \((Double(n) / elapsed).fixed(0, width: 9)) notifications/s  \(cpuMicroseconds.fixed(1)) µs CPU per notification"
                    + (failures > 0 ? "  \(failures) not delivered" : ""))
        console.out("  one ECDH            \(ecdhMicroseconds.fixed(1, width: 9)) µs  (openssl speed -seconds \(seconds) ecdhp256: \(Int(ecdhPerSecond)) /s)")
        console.out("  one key generation  \(keygenMicroseconds.fixed(1, width: 9)) µs  (P256EphemeralKey.generate in this process)")
        console.out("  one ECDH + one key generation \(referenceMicroseconds.fixed(1)) µs")
        console.out("target: CPU per notification ≤ \(Self.targetRatio.fixed(0))× one ECDH + one key generation: \(ratio.fixed(2))×, "
                    + (ratio <= Self.targetRatio && failures == 0 ? "met" : "not met"))
        if failures > 0 { throw APNsBenchmark.Failure(description: "\(failures) of \(n) notifications were not delivered") }
    }

    /// µs per `P256EphemeralKey.generate()`, over about `seconds` seconds of one thread.
    static func keyGenerationMicroseconds(seconds: Double) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        let cpu0 = processCPUSeconds()
        var count = 0
        repeat {
            for _ in 0..<50 { _ = try P256EphemeralKey.generate() }
            count += 50
        } while Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9 < seconds
        return (processCPUSeconds() - cpu0) / Double(count) * 1e6
    }
}
