import Dispatch
import FoundationEssentials
import Glibc
import HeraldChinaPush
import HeraldCLI
import HeraldCore
import HeraldCrypto

/// `herald-bench china`: each China vendor plugin on one connection to its `herald simulate`,
/// next to h2load posting the same single-device request to the same simulator.
enum ChinaPushBenchCommand {
    static let vendors = ["hms", "xiaomi", "oppo", "vivo"]

    static let spec = CommandSpec(
        path: "china",
        summary: "Benchmark the hms, xiaomi, oppo and vivo transports against their simulators, next to h2load.",
        usage: "china [--vendor hms|xiaomi|oppo|vivo] [--engine curl|nghttp2] [--n N] [--streams S] [--work DIR]",
        options: [
            .value("vendor", "NAME", "one plugin (default: all four)"),
            .value("engine", "ENGINE", "the plugins' HTTP engine: curl (their default) or nghttp2 (default curl)"),
            .value("n", "N", "notifications per run (default 20000)"),
            .value("streams", "S", "requests in flight on the connection, for h2load -m (the transports use up to 100) (default 100)"),
            .value("work", "DIR", "folder for certificates and the simulators' logs (default var/bench-china)"),
        ],
        discussion: """
        For each vendor: starts `herald simulate VENDOR` (another process), gets an access token
        from it with curl where the vendor has one, and runs h2load -c 1 -m S posting the request
        the plugin sends for one notification to one device (vivo's with one requestId for all, which
        the simulator answers as a duplicate without storing it). Then sends N notifications, each to
        one device, through the plugin (--engine, one connection). Prints notifications/s and
        this process's CPU (getrusage) per notification, and the ratio to h2load; target ≥ 0.5×.
        Needs h2load, curl and openssl.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 100...10_000_000) ?? 20_000
        let streams = try arguments.int("streams", command: spec.path, in: 1...10_000) ?? 100
        let work = URL(fileURLWithPath: arguments.value("work") ?? "var/bench-china").standardizedFileURL.path
        var chosen = vendors
        if let v = arguments.value("vendor") {
            guard vendors.contains(v) else { throw .usage("--vendor: expected one of \(vendors.joined(separator: ", ")), found \"\(v)\"", command: spec.path) }
            chosen = [v]
        }
        let engine = arguments.value("engine") ?? "curl"
        guard ["curl", "nghttp2"].contains(engine) else { throw .usage("--engine: expected curl or nghttp2, found \"\(engine)\"", command: spec.path) }
        do {
            let bench = ChinaPushBenchmark(n: n, streams: streams, work: work, engine: engine, registry: context.registry, console: context.console)
            try await bench.run(chosen)
        } catch let error as CLIError {
            throw error
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }
}

/// The moving parts of `herald-bench china`.
struct ChinaPushBenchmark {
    let n: Int
    let streams: Int
    let work: String
    let engine: String
    let registry: TransportRegistry
    let console: Console
    /// The simulators' default credentials (`herald simulate … --help`).
    static let appID = "10086000", appSecret = "sim-app-secret", appKey = "sim-app-key", masterSecret = "sim-master-secret"
    static let token = "IQAAAACy0kVvAAB5h2nRlm8cTk9Yq3bBenchDevice0001"
    static let targetRatio = 0.5

    typealias Failure = APNsBenchmark.Failure

    func run(_ vendors: [String]) async throws {
        for tool in ["h2load", "curl", "openssl"] where which(tool) == nil {
            throw Failure(description: "\(tool) is not installed (run scripts/bootstrap.sh)")
        }
        let certs = work + "/certs"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])
        console.out("China vendors, \(engine) engine, 1 connection, \(n) notifications of one device each, servers herald simulate VENDOR (another process):")
        var missed: [String] = []
        for vendor in vendors {
            let (reference, rate, cpu, failures) = try await measure(vendor, certs: certs)
            let ratio = rate / reference
            console.out("  \(vendor.padding(toLength: 7, withPad: " ", startingAt: 0)) h2load \(reference.fixed(0, width: 8)) req/s   herald \(rate.fixed(0, width: 8)) notifications/s"
                        + "  (\(ratio.fixed(2))× h2load, target ≥ \(Self.targetRatio.fixed(1))×: \(ratio >= Self.targetRatio ? "met" : "not met"))"
                        + "  \(cpu.fixed(1)) µs CPU per notification" + (failures > 0 ? "  \(failures) not delivered" : ""))
            if failures > 0 { missed.append("\(vendor): \(failures)") }
        }
        if !missed.isEmpty { throw Failure(description: "not delivered: \(missed.joined(separator: ", "))") }
    }

    /// h2load's requests/s, then the plugin's notifications/s, CPU µs per notification and failures.
    func measure(_ vendor: String, certs: String) async throws -> (Double, Double, Double, Int) {
        let sim = try SimulatorProcess.start(["simulate", vendor, "--tls-cert", certs + "/server.pem", "--tls-key", certs + "/server.key"],
                                             log: work + "/\(vendor)-simulator.txt")
        defer { sim.stop() }
        guard let port = sim.port else { throw Failure(description: "cannot read the \(vendor) simulator's port: \(sim.lines)") }
        let origin = "https://127.0.0.1:\(port)"
        let section: String
        switch vendor {
        case "hms": section = #""type": "hms", "appId": "\#(Self.appID)", "appSecret": "\#(Self.appSecret)", "authEndpoint": "\#(origin)/oauth2/v3/token""#
        case "xiaomi": section = #""type": "xiaomi", "appSecret": "\#(Self.appSecret)", "packageName": "com.example.app""#
        case "oppo": section = #""type": "oppo", "appKey": "\#(Self.appKey)", "masterSecret": "\#(Self.masterSecret)", "channelId": "messages""#
        default: section = #""type": "vivo", "appId": "\#(Self.appID)", "appKey": "\#(Self.appKey)", "appSecret": "\#(Self.appSecret)""#
        }
        let config = """
        {"apps": {"com.example.app": {"routes": ["\(vendor)"]}},
         "transports": {"\(vendor)": {\(section), "endpoint": "\(origin)", "caFile": "\(certs)/ca.pem", "timeout": "60s", "engine": "\(engine)"}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(config.utf8), baseDirectory: work, registry: registry, environment: [:])
        let spec = configuration.transports[vendor]!
        let content = NotificationContent(title: "Benchmark", body: "Hello from Herald", category: "im")
        let rendered = try spec.configuration.render(content, context: RenderContext(notificationID: "bench", app: "com.example.app", topic: "com.example.app"))
        let message = try JSONValue.parse(rendered.body).objectValue ?? [:]

        // The request the plugin sends for one notification to one device.
        let path: String, headers: [String], body: [UInt8]
        switch vendor {
        case "hms":
            let token = try accessToken(curl: ["-d", "grant_type=client_credentials&client_id=\(Self.appID)&client_secret=\(Self.appSecret)",
                                               origin + "/oauth2/v3/token"], certs: certs) { $0["access_token"]?.stringValue }
            var m = message
            m["token"] = [.string(Self.token)]
            path = "/v1/\(Self.appID)/messages:send"
            headers = ["content-type: application/json; charset=UTF-8", "authorization: Bearer \(token)"]
            body = Array(#"{"message":\#(JSONValue.object(m).jsonString),"validate_only":false}"#.utf8)
        case "xiaomi":
            var form = FormBody()
            form.append("registration_id", Self.token)
            for key in message.keys.sorted() { form.append(key, message[key]?.stringValue ?? "") }
            path = "/v3/message/regid"
            headers = ["content-type: application/x-www-form-urlencoded; charset=UTF-8", "authorization: key=\(Self.appSecret)"]
            body = form.bytes
        case "oppo":
            let ts = String(Int64(Date().timeIntervalSince1970 * 1000))
            let sign = SHA256.hash(Array((Self.appKey + ts + Self.masterSecret).utf8)).map { String(format: "%02x", $0) }.joined()
            let token = try accessToken(curl: ["-d", "app_key=\(Self.appKey)&timestamp=\(ts)&sign=\(sign)", origin + "/server/v1/auth"],
                                        certs: certs) { $0["data"]?["auth_token"]?.stringValue }
            var form = FormBody()
            form.append("message", JSONValue.object(["target_type": 2, "target_value": .string(Self.token), "notification": .object(message)]).jsonString)
            form.append("auth_token", token)
            path = "/server/v1/message/notification/unicast"
            headers = ["content-type: application/x-www-form-urlencoded; charset=UTF-8"]
            body = form.bytes
        default:
            let ts = String(Int64(Date().timeIntervalSince1970 * 1000))
            let sign = MD5.hex(Array((Self.appID + Self.appKey + ts + Self.appSecret).utf8))
            let auth = JSONValue.object(["appId": .string(Self.appID), "appKey": .string(Self.appKey), "timestamp": .string(ts), "sign": .string(sign)]).jsonString
            let token = try accessToken(curl: ["-H", "content-type: application/json", "-d", auth, origin + "/message/auth"], certs: certs) {
                $0["authToken"]?.stringValue
            }
            var m = message
            m["regId"] = .string(Self.token)
            m["requestId"] = "bench-request"
            path = "/message/send"
            headers = ["content-type: application/json; charset=UTF-8", "authtoken: \(token)"]
            body = Array(JSONValue.object(m).jsonString.utf8)
        }
        let bodyFile = work + "/\(vendor)-body"
        try Data(body).write(to: URL(fileURLWithPath: bodyFile))
        let reference = try FCMBenchmark(n: n, streams: streams, work: work, registry: registry, console: console)
            .h2load(url: origin + path, headers: headers, body: bodyFile)

        let transport = try registry.makeTransport(spec, context: TransportContext(logger: Logger(label: "bench", level: .error)))
        try await transport.start()
        let deliveries = (0..<n).map { i in
            Delivery(id: Int64(i), notificationID: "bench-\(i)", app: "com.example.app", topic: "com.example.app", token: Self.token,
                     user: nil, transport: spec.name, content: content, payload: rendered)
        }
        let warm = await transport.deliver(Array(deliveries.prefix(100)))
        guard warm.allSatisfy({ if case .delivered = $0 { return true }; return false }) else {
            await transport.shutdown()
            throw Failure(description: "\(vendor): the warm-up was not delivered: \(warm.first { if case .delivered = $0 { return false }; return true }!)")
        }
        let batch = 200
        let cpuBefore = processCPUSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        let failures = await deliverInBatches(transport, count: (n + batch - 1) / batch, inFlight: 2) { i in
            Array(deliveries[i * batch..<min((i + 1) * batch, deliveries.count)])
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = processCPUSeconds() - cpuBefore
        await transport.shutdown()
        return (reference, Double(n) / seconds, cpu / Double(n) * 1e6, failures)
    }

    /// An access token from the simulator's auth endpoint, posted with curl. Never printed.
    func accessToken(curl arguments: [String], certs: String, read: (JSONValue) -> String?) throws -> String {
        let output = try shell(which("curl")!, ["-s", "--cacert", certs + "/ca.pem"] + arguments)
        guard let json = try? JSONValue.parse(Array(output.utf8)), let token = read(json) else {
            throw Failure(description: "the auth endpoint gave no token (\(output.count) bytes answered)")
        }
        return token
    }
}
