import Dispatch
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldAPNsHTTP2
import HeraldCLI
import HeraldCore
import HeraldTestKit

/// `herald-bench apns-broadcast`: Live Activities through the apns-http2 transport against
/// `herald simulate apns-http2 --management-port`: one update to many update tokens (next to
/// h2load with the same request), channel creation, and one broadcast's latency.
enum BroadcastBenchCommand {
    static let spec = CommandSpec(
        path: "apns-broadcast",
        summary: "Benchmark Live Activity updates, channel creation and broadcasts against the APNs simulator.",
        usage: "apns-broadcast [--tokens N] [--broadcasts N] [--channels N] [--engine curl|nghttp2] [--work DIR] [--json]",
        options: [
            .value("tokens", "N", "update tokens of the activity update (default 10000)"),
            .value("broadcasts", "N", "broadcasts sent one at a time for the latency (default 1000)"),
            .value("channels", "N", "channels created one at a time (default 100)"),
            .value("engine", "E", "the transport's engine (default nghttp2)"),
            .value("work", "DIR", "folder for certificates (default var/bench)"),
            .flag("json", "print the figures as one JSON object"),
        ],
        discussion: """
        Starts the simulator (token auth, TLS, the management API on a second port) and a transport
        pointed at it. Measures: one Live Activity update (event update, 100 streams in flight)
        to N distinct update tokens, in notifications/s, beside h2load -c1 -m100 with the same
        request to one token; the latency of creating a channel; and the latency of one broadcast
        (POST /4/broadcasts/apps/…, one in flight), median and 99th percentile.
        Needs h2load (Debian nghttp2-client) and openssl.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let tokens = try arguments.int("tokens", command: spec.path, in: 100...1_000_000) ?? 10_000
        let broadcasts = try arguments.int("broadcasts", command: spec.path, in: 10...1_000_000) ?? 1000
        let channels = try arguments.int("channels", command: spec.path, in: 1...10_000) ?? 100
        let engine = arguments.value("engine") ?? "nghttp2"
        guard ["curl", "nghttp2"].contains(engine) else { throw .usage("--engine: expected curl or nghttp2", command: spec.path) }
        let work = URL(fileURLWithPath: arguments.value("work") ?? "var/bench").standardizedFileURL.path
        do {
            let bench = BroadcastBenchmark(tokens: tokens, broadcasts: broadcasts, channels: channels, engine: engine, work: work,
                                           registry: context.registry, console: context.console)
            try await bench.run(json: arguments.flag("json"))
        } catch let error as CLIError {
            throw error
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }
}

struct BroadcastBenchmark {
    let tokens: Int
    let broadcasts: Int
    let channels: Int
    let engine: String
    let work: String
    let registry: TransportRegistry
    let console: Console
    static let streams = 100
    static let bundle = "com.example.app"

    struct Failure: Error, CustomStringConvertible { var description: String }

    static func update(_ n: Int) -> [UInt8] {
        Array(#"{"aps":{"event":"update","timestamp":\#(1_790_000_000 + n),"content-state":{"home":\#(n % 10),"away":1,"minute":\#(n % 90)}}}"#.utf8)
    }

    func run(json: Bool) async throws {
        for tool in ["h2load", "openssl"] where which(tool) == nil {
            throw Failure(description: "\(tool) is not installed (run scripts/bootstrap.sh)")
        }
        let certs = work + "/certs"
        try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])
        let port = try Loopback.freePort()
        let managementPort = try Loopback.freePort()
        let process = try Subprocess(try BenchExecutables.herald(), [
            "simulate", "apns-http2", "--port", String(port), "--management-port", String(managementPort),
            "--tls-cert", certs + "/server.pem", "--tls-key", certs + "/server.key",
            "--auth-key-pub", "ABC123DEFG=\(certs)/AuthKey_ABC123DEFG.pub.pem", "--team", "DEF123GHIJ",
            "--topic", Self.bundle, "--allow-streams-before-auth"])
        defer { process.stop() }
        try waitForPort(port)
        try waitForPort(managementPort)

        // h2load: the same update to one token.
        let payloadFile = work + "/liveactivity.json"
        try String(decoding: Self.update(1), as: UTF8.self).write(toFile: payloadFile, atomically: true, encoding: .utf8)
        let reference = try h2load(port: port, payloadFile: payloadFile, certs: certs)

        let config = """
        {"apps": {"\(Self.bundle)": {"routes": ["apns"]}},
         "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "https://127.0.0.1:\(port)",
                                 "managementEndpoint": "https://127.0.0.1:\(managementPort)",
                                 "caFile": "\(certs)/ca.pem", "keyFile": "\(certs)/AuthKey_ABC123DEFG.p8",
                                 "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "engine": "\(engine)",
                                 "maxConcurrentStreams": \(Self.streams), "connectionRetries": 5}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(config.utf8), baseDirectory: work, registry: registry, environment: [:])
        let made = try registry.makeTransport(configuration.transports["apns"]!, context: TransportContext(logger: Logger(label: "bench", level: .error)))
        guard let transport = made as? APNsHTTP2Transport else { throw Failure(description: "the apns transport is not apns-http2") }
        try await transport.start()

        // One update to every update token of an activity.
        var content = NotificationContent()
        content.apns.liveActivity = LiveActivityContent(event: .update, timestamp: 1_790_000_001, contentState: ["home": 1, "away": 1, "minute": 1])
        content.apns.pushType = .liveactivity
        let payload = try APNsRoute.render(content, context: RenderContext(notificationID: "bench", app: Self.bundle, topic: Self.bundle))
        let deliveries = (0..<tokens).map { i in
            Delivery(id: Int64(i), notificationID: "bench", app: Self.bundle, topic: Self.bundle, token: String(format: "%064x", i + 1),
                     user: nil, transport: "apns", content: content, payload: payload)
        }
        _ = await transport.deliver(Array(deliveries.prefix(Self.streams)))
        let batch = Self.streams * 2
        let cpuBefore = processCPUSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        let failures = await deliverInBatches(transport, count: (tokens + batch - 1) / batch, inFlight: 4) { i in
            Array(deliveries[i * batch..<min((i + 1) * batch, deliveries.count)])
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = (processCPUSeconds() - cpuBefore) / Double(tokens) * 1e6
        let rate = Double(tokens) / seconds

        // Channels, one at a time.
        var created: [String] = []
        var createLatencies: [Double] = []
        for _ in 0..<channels {
            let t0 = DispatchTime.now().uptimeNanoseconds
            let channel = try await transport.channels.create(bundleID: Self.bundle, storagePolicy: .noMessageStored).get()
            createLatencies.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e6)
            created.append(channel.id)
        }

        // Broadcasts, one at a time.
        var latencies: [Double] = []
        var broadcastFailures = 0
        for i in 0..<broadcasts {
            let t0 = DispatchTime.now().uptimeNanoseconds
            switch await transport.channels.broadcast(bundleID: Self.bundle, channelID: created[i % created.count], payload: Self.update(i), priority: 10) {
            case .success: latencies.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e6)
            case .failure: broadcastFailures += 1
            }
        }
        for id in created { _ = await transport.channels.delete(bundleID: Self.bundle, channelID: id) }
        await transport.shutdown()

        let create = Self.percentiles(createLatencies), broadcast = Self.percentiles(latencies)
        if json {
            console.out(JSONValue.object([
                "engine": .string(engine), "tokens": .number(Double(tokens)), "update_per_s": .number(rate.rounded()),
                "h2load_per_s": .number(reference.rounded()), "ratio": .number((rate / reference * 1000).rounded() / 1000),
                "cpu_us_per_notification": .number((cpu * 10).rounded() / 10), "update_failures": .number(Double(failures)),
                "channel_create_ms_p50": .number(create.p50), "channel_create_ms_p99": .number(create.p99),
                "broadcast_ms_p50": .number(broadcast.p50), "broadcast_ms_p99": .number(broadcast.p99),
                "broadcast_failures": .number(Double(broadcastFailures)),
            ]).jsonString)
        } else {
            console.out("Live Activity update to \(tokens) update tokens, \(engine) engine, 1 connection, \(Self.streams) streams:")
            console.out("  h2load         \(reference.fixed(0, width: 9)) req/s (one token)")
            console.out("  herald         \(rate.fixed(0, width: 9)) notifications/s  (\((rate / reference).fixed(2))× h2load)  \(cpu.fixed(1)) µs CPU per notification"
                        + (failures > 0 ? "  \(failures) not delivered" : ""))
            console.out("channel creation, one at a time (\(channels)): median \(create.p50.fixed(2)) ms, p99 \(create.p99.fixed(2)) ms")
            console.out("broadcast, one at a time (\(broadcasts)): median \(broadcast.p50.fixed(2)) ms, p99 \(broadcast.p99.fixed(2)) ms"
                        + (broadcastFailures > 0 ? "  \(broadcastFailures) failed" : ""))
        }
    }

    static func percentiles(_ values: [Double]) -> (p50: Double, p99: Double) {
        guard !values.isEmpty else { return (0, 0) }
        let sorted = values.sorted()
        func at(_ q: Double) -> Double { (sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q + 0.5))] * 1000).rounded() / 1000 }
        return (at(0.5), at(0.99))
    }

    func h2load(port: Int, payloadFile: String, certs: String) throws -> Double {
        let jwt = try APNsBenchmark(n: tokens, streams: Self.streams, work: work, registry: registry, console: console).makeJWT(certs: certs)
        let args = ["-n", String(tokens), "-c", "1", "-m", String(Self.streams), "-t", "1", "-d", payloadFile,
                    "-H", "apns-topic: \(Self.bundle).push-type.liveactivity", "-H", "apns-push-type: liveactivity", "-H", "apns-priority: 10",
                    "-H", "authorization: bearer \(jwt)", "https://127.0.0.1:\(port)/3/device/\(String(format: "%064x", 1))"]
        let output = try shell(which("h2load")!, args)
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
              let rate = line.split(separator: ",").dropFirst().first?.split(separator: " ").first.flatMap({ Double($0) }) else {
            throw Failure(description: "cannot read h2load's output:\n\(output)")
        }
        if let status = output.split(separator: "\n").first(where: { $0.contains("status codes:") }), !status.contains("\(tokens) 2xx") {
            throw Failure(description: "h2load: the simulator refused requests: \(status.trimmingWhitespace())")
        }
        return rate
    }
}
