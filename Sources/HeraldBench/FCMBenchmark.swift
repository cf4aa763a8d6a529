import Dispatch
import FoundationEssentials
import Glibc
import HeraldCLI
import HeraldCore
import HeraldCrypto
import HeraldFCM

/// `herald-bench fcm`: the `fcm` transport on one connection to `herald simulate fcm`, next to
/// h2load against the same simulator and the apns-http2 nghttp2 engine against the APNs simulator.
enum FCMBenchCommand {
    static let spec = CommandSpec(
        path: "fcm",
        summary: "Benchmark the fcm transport against herald simulate fcm, next to h2load and the apns-http2 nghttp2 engine.",
        usage: "fcm [--n N] [--streams S] [--work DIR]",
        options: [
            .value("n", "N", "notifications per run (default 50000)"),
            .value("streams", "S", "streams in flight on the connection, for h2load -m and both transports (default 100)"),
            .value("work", "DIR", "folder for certificates and the simulators' files (default var/bench-fcm)"),
        ],
        discussion: """
        Starts `herald simulate fcm` (another process) with a fresh service account, gets an access
        token from its token endpoint (an RS256 assertion signed with the account's key, posted with
        curl) and runs h2load -c 1 -m S with the body the transport sends to messages:send. Then
        sends N notifications through the fcm transport (nghttp2 engine, one connection), and N
        through apns-http2 (nghttp2 engine, one connection) to `herald simulate apns-http2`.
        Prints notifications/s and this process's CPU (getrusage) per notification for each, and
        the ratios; targets: at least 0.6× h2load, CPU at most 1.2× the APNs engine's.
        Needs h2load, curl and openssl.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 100...10_000_000) ?? 50_000
        let streams = try arguments.int("streams", command: spec.path, in: 1...10_000) ?? 100
        let work = URL(fileURLWithPath: arguments.value("work") ?? "var/bench-fcm").standardizedFileURL.path
        do {
            try await FCMBenchmark(n: n, streams: streams, work: work, registry: context.registry, console: context.console).run()
        } catch let error as CLIError {
            throw error
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }
}

/// The moving parts of `herald-bench fcm`.
struct FCMBenchmark {
    let n: Int
    let streams: Int
    let work: String
    let registry: TransportRegistry
    let console: Console
    /// A registration token of a plausible shape (FCM's are about 160 characters).
    let token = "bench" + String(repeating: "x1Y2z3", count: 25) + ":APA91b"

    /// The issue's targets: notifications/s at least this share of h2load's; CPU per notification
    /// at most this multiple of the apns-http2 nghttp2 engine's.
    static let targetRatio = 0.6
    static let targetCPURatio = 1.2

    typealias Failure = APNsBenchmark.Failure

    func run() async throws {
        for tool in ["h2load", "curl", "openssl"] where which(tool) == nil {
            throw Failure(description: "\(tool) is not installed (run scripts/bootstrap.sh)")
        }
        let certs = work + "/certs"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])
        let account = work + "/service-account.json"
        try? FileManager.default.removeItem(atPath: account)
        let fcm = try SimulatorProcess.start(["simulate", "fcm", "--tls-cert", certs + "/server.pem", "--tls-key", certs + "/server.key",
                                              "--service-account-out", account], log: work + "/fcm-simulator.txt")
        defer { fcm.stop() }
        guard let port = fcm.port else { throw Failure(description: "cannot read the FCM simulator's port: \(fcm.lines)") }

        let config = """
        {"apps": {"com.example.android": {"routes": ["android"]}},
         "transports": {"android": {"type": "fcm", "credentialsFile": "\(account)", "endpoint": "https://127.0.0.1:\(port)",
                                    "caFile": "\(certs)/ca.pem", "engine": "nghttp2", "connections": 1,
                                    "maxConcurrentStreams": \(streams), "timeout": "60s"}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(config.utf8), baseDirectory: work, registry: registry, environment: [:])
        let spec = configuration.transports["android"]!
        guard let fcmConfiguration = spec.configuration as? FCMConfiguration else { throw Failure(description: "not an fcm configuration") }
        let content = NotificationContent(title: "Benchmark", body: "Hello from Herald")
        let address = try spec.configuration.address(.token(token), attributes: DeviceAttributes()).token
        let rendered = try spec.configuration.render(content, context: RenderContext(notificationID: "bench", app: "com.example.android",
                                                                                      topic: "com.example.android"))

        // h2load with what the transport sends: the message with its token, a bearer access token.
        let accessToken = try fetchAccessToken(fcmConfiguration, certs: certs)
        let body = Array(#"{"message":{"token":"\#(address)","#.utf8) + rendered.body.dropFirst() + Array("}".utf8)
        try Data(body).write(to: URL(fileURLWithPath: work + "/fcm-body.json"))
        let reference = try h2load(url: "https://127.0.0.1:\(port)/v1/projects/\(fcmConfiguration.projectID)/messages:send",
                                   headers: ["content-type: application/json", "authorization: Bearer \(accessToken)"],
                                   body: work + "/fcm-body.json")

        let (rate, cpu, failures) = try await transportRun(spec: spec, content: content, rendered: rendered, token: address)
        fcm.stop()

        // The apns-http2 nghttp2 engine, one connection, against its simulator: the CPU reference.
        let apns = try APNsBenchmark(n: n, streams: streams, work: work, registry: registry, console: console, engines: ["nghttp2"])
        let apnsServer = try Server.simulator(certs: certs)
        defer { apnsServer.stop() }
        let (apnsRate, apnsCPU, apnsFailures) = try await apns.transportRun(port: apnsServer.port, connections: 1, certs: certs, engine: "nghttp2")

        let ratio = rate / reference, cpuRatio = cpu / apnsCPU
        console.out("fcm, 1 connection, \(streams) streams, \(n) notifications, server herald simulate fcm (another process):")
        console.out("  h2load              \(reference.fixed(0, width: 9)) req/s")
        console.out("  herald fcm          \(rate.fixed(0, width: 9)) notifications/s  (\(ratio.fixed(2))× h2load)  \(cpu.fixed(1)) µs CPU per notification"
                    + (failures > 0 ? "  \(failures) not delivered" : ""))
        console.out("  herald apns-http2   \(apnsRate.fixed(0, width: 9)) notifications/s  (nghttp2 engine, herald simulate apns-http2)  \(apnsCPU.fixed(1)) µs CPU per notification"
                    + (apnsFailures > 0 ? "  \(apnsFailures) not delivered" : ""))
        console.out("targets, fcm on one connection:")
        console.out("  \(ratio.fixed(2))× h2load (target ≥ \(Self.targetRatio.fixed(1))×): " + (ratio >= Self.targetRatio ? "met" : "not met"))
        console.out("  CPU \(cpuRatio.fixed(2))× the apns-http2 nghttp2 engine's (target ≤ \(Self.targetCPURatio.fixed(1))×): "
                    + (cpuRatio <= Self.targetCPURatio ? "met" : "not met"))
        if failures + apnsFailures > 0 {
            throw Failure(description: "not delivered: \(failures) through fcm, \(apnsFailures) through apns-http2")
        }
    }

    /// Sends `n` notifications through a fresh fcm transport; returns notifications/s, CPU µs per
    /// notification, and how many were not delivered.
    func transportRun(spec: TransportSpec, content: NotificationContent, rendered: RenderedPayload, token: String) async throws -> (Double, Double, Int) {
        let transport = try registry.makeTransport(spec, context: TransportContext(logger: Logger(label: "bench", level: .error)))
        try await transport.start()
        let deliveries = (0..<n).map { i in
            Delivery(id: Int64(i), notificationID: "bench-\(i)", app: "com.example.android", topic: "com.example.android", token: token,
                     user: nil, transport: spec.name, content: content, payload: rendered)
        }
        // Warm up: the connection and the access token.
        let warm = await transport.deliver(Array(deliveries.prefix(streams)))
        guard warm.allSatisfy({ if case .delivered = $0 { return true }; return false }) else {
            await transport.shutdown()
            throw Failure(description: "the warm-up was not delivered: \(warm.first { if case .delivered = $0 { return false }; return true }!)")
        }
        let batch = max(streams * 2, 200)
        let cpuBefore = processCPUSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        let failures = await deliverInBatches(transport, count: (n + batch - 1) / batch, inFlight: 4) { i in
            Array(deliveries[i * batch..<min((i + 1) * batch, deliveries.count)])
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = processCPUSeconds() - cpuBefore
        await transport.shutdown()
        return (Double(n) / seconds, cpu / Double(n) * 1e6, failures)
    }

    /// An access token from the simulator's token endpoint: the JWT-bearer grant with an RS256
    /// assertion signed by the service account's key, posted with curl. Never printed.
    func fetchAccessToken(_ c: FCMConfiguration, certs: String) throws -> String {
        guard let key = c.credentials.signingKey else { throw Failure(description: "the service account's key cannot be used") }
        let iat = Int64(Date().timeIntervalSince1970) - 10
        let claims: JWTClaims = ["iss": .string(c.credentials.clientEmail), "scope": .string("https://www.googleapis.com/auth/firebase.messaging"),
                                 "aud": .string(c.credentials.tokenURI.description), "iat": .number(Double(iat)), "exp": .number(Double(iat + 3600))]
        let assertion = try JWT.sign(claims, key: key, keyID: c.credentials.privateKeyID)
        let output = try shell(which("curl")!, ["-s", "--cacert", certs + "/ca.pem",
                                                "-d", "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)",
                                                c.credentials.tokenURI.description])
        guard let json = try? JSONValue.parse(Array(output.utf8)), let token = json["access_token"]?.stringValue else {
            throw Failure(description: "the token endpoint gave no access_token (\(output.count) bytes answered)")
        }
        return token
    }

    /// h2load -c 1 -m streams on `url`; returns requests/s (all of them must be 2xx).
    func h2load(url: String, headers: [String], body: String) throws -> Double {
        var args = ["-n", String(n), "-c", "1", "-m", String(streams), "-t", "1", "-d", body]
        for h in headers { args += ["-H", h] }
        let output = try shell(which("h2load")!, args + [url])
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
              let rate = line.split(separator: ",").dropFirst().first?.split(separator: " ").first.flatMap({ Double($0) }) else {
            throw Failure(description: "cannot read h2load's output:\n\(output.suffix(500))")
        }
        if let status = output.split(separator: "\n").first(where: { $0.contains("status codes:") }), !status.contains("\(n) 2xx") {
            throw Failure(description: "h2load: not every request was answered 2xx: \(status.trimmingWhitespace())")
        }
        return rate
    }
}
