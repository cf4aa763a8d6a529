import Dispatch
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCLI
import HeraldCore
import HeraldCrypto
import HeraldTestKit

/// The moving parts of `herald-bench apns-http2`.
struct APNsBenchmark {
    let n: Int
    let streams: Int
    let work: String
    let registry: TransportRegistry
    let console: Console
    let token = String(repeating: "ab", count: 32)
    let payload = #"{"aps":{"alert":{"title":"Benchmark","body":"Hello from Herald"},"badge":1}}"#

    /// The engines measured, in this order.
    let engines: [String]

    init(n: Int, streams: Int, work: String, registry: TransportRegistry, console: Console, engines: [String] = allEngines) throws {
        self.engines = engines
        self.n = n
        self.streams = streams
        self.work = URL(fileURLWithPath: work).standardizedFileURL.path
        self.registry = registry
        self.console = console
    }

    struct Failure: Error, CustomStringConvertible { var description: String }

    /// - Parameter connections: connections of the second round (default: one per core).
    func run(serverChoice: String, connections: Int?, json: Bool) async throws {
        for tool in ["h2load", "nghttpd", "openssl"] where which(tool) == nil {
            throw Failure(description: "\(tool) is not installed (run scripts/bootstrap.sh)")
        }
        let certs = work + "/certs"
        try shell("/bin/bash", [PackageScripts.path("make-test-certs.sh"), certs])
        try FileManager.default.createDirectory(atPath: work + "/htdocs/3/device", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: work + "/htdocs/3/device/\(token)", contents: nil)
        try payload.write(toFile: work + "/payload.json", atomically: true, encoding: .utf8)

        // Choose the server: the simulator only when h2load gets at least as much from it.
        var server = try Server.nghttpd(work: work, certs: certs)
        var serverName = "nghttpd"
        let jwt = try makeJWT(certs: certs)
        let nghttpdRate = try h2load(port: server.port, connections: 1, jwt: jwt)
        if serverChoice != "nghttpd", let simulator = try? Server.simulator(certs: certs) {
            let simulatorRate = try h2load(port: simulator.port, connections: 1, jwt: jwt)
            console.err("bench: h2load -c1 -m\(streams): nghttpd \(Int(nghttpdRate)) req/s, simulator \(Int(simulatorRate)) req/s")
            if serverChoice == "simulator" || simulatorRate >= nghttpdRate {
                server.stop()
                server = simulator
                serverName = "herald simulate apns-http2"
            } else {
                simulator.stop()
            }
        } else if serverChoice == "simulator" {
            throw Failure(description: "cannot start the simulator")
        }
        defer { server.stop() }

        var rows: [[String: JSONValue]] = []
        var single: (reference: Double, rate: Double, cpu: Double)? = nil
        let cores = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        for c in [1, connections ?? cores] {
            let reference = try h2load(port: server.port, connections: c, jwt: jwt)
            if !json {
                console.out("apns-http2, \(c) connection\(c == 1 ? "" : "s"), \(streams) streams each, \(n) notifications, server \(serverName):")
                console.out("  h2load           \(reference.fixed(0, width: 9)) req/s")
            }
            for engine in engines {
                let (rate, cpu, failures) = try await transportRun(port: server.port, connections: c, certs: certs, engine: engine)
                let ratio = rate / reference
                if c == 1 && engine == "nghttp2" { single = (reference, rate, cpu) }
                rows.append(["connections": .number(Double(c)), "engine": .string(engine), "h2load_per_s": .number(reference.rounded()),
                             "herald_per_s": .number(rate.rounded()), "ratio": .number((ratio * 1000).rounded() / 1000),
                             "cpu_us_per_notification": .number((cpu * 10).rounded() / 10), "failures": .number(Double(failures))])
                if !json {
                    let label = "herald \(engine)" + String(repeating: " ", count: max(0, 16 - 7 - engine.count))
                    console.out("  \(label) \(rate.fixed(0, width: 9)) notifications/s  (\(ratio.fixed(2))× h2load)  \(cpu.fixed(1)) µs CPU per notification"
                                + (failures > 0 ? "  \(failures) not delivered" : ""))
                }
            }
        }

        // The issue's targets: the nghttp2 engine on one connection against h2load on one connection.
        guard engines.contains("nghttp2") else {
            if json {
                console.out(JSONValue.object(["server": .string(serverName), "n": .number(Double(n)), "streams": .number(Double(streams)),
                                              "runs": .array(rows.map { .object($0) })]).jsonString)
            }
            return
        }
        let ratio = single.map { $0.rate / $0.reference } ?? 0
        let cpu = single?.cpu ?? .infinity
        let ratioMet = ratio >= Self.targetRatio, cpuMet = cpu <= Self.targetCPU
        if json {
            let target: [String: JSONValue] = [
                "engine": "nghttp2", "connections": 1, "ratio": .number((ratio * 1000).rounded() / 1000),
                "target_ratio": .number(Self.targetRatio), "ratio_met": .bool(ratioMet),
                "cpu_us_per_notification": .number((cpu * 10).rounded() / 10), "target_cpu_us_per_notification": .number(Self.targetCPU),
                "cpu_met": .bool(cpuMet), "met": .bool(ratioMet && cpuMet),
            ]
            console.out(JSONValue.object(["server": .string(serverName), "n": .number(Double(n)), "streams": .number(Double(streams)),
                                          "runs": .array(rows.map { .object($0) }), "target": .object(target)]).jsonString)
        } else {
            console.out("targets, nghttp2 engine on one connection:")
            console.out("  \(ratio.fixed(2))× h2load (target ≥ \(Self.targetRatio.fixed(2))×): " + (ratioMet ? "met" : "not met"))
            console.out("  \(cpu.fixed(1)) µs CPU per notification (target ≤ \(Self.targetCPU.fixed(0)) µs): " + (cpuMet ? "met" : "not met"))
        }
    }

    static let allEngines = ["curl", "nghttp2"]
    /// The issue's targets for the nghttp2 engine on one connection: notifications/s at least this
    /// share of h2load's, and at most this much CPU per notification (µs).
    static let targetRatio = 0.6
    static let targetCPU = 15.0

    /// Sends `n` notifications through a fresh transport; returns notifications/s, CPU µs per
    /// notification, and how many were not delivered.
    func transportRun(port: Int, connections: Int, certs: String, engine: String) async throws -> (Double, Double, Int) {
        let config = """
        {"apps": {"com.example.app": {"routes": ["apns"]}},
         "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "https://127.0.0.1:\(port)",
                                 "caFile": "\(certs)/ca.pem", "keyFile": "\(certs)/AuthKey_ABC123DEFG.p8",
                                 "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ",
                                 "engine": "\(engine)", "connections": \(connections), "maxConcurrentStreams": \(streams), "connectionRetries": 5}}}
        """
        let configuration = try HeraldConfiguration.parse(Data(config.utf8), baseDirectory: work, registry: registry, environment: [:])
        let spec = configuration.transports["apns"]!
        let transport = try registry.makeTransport(spec, context: TransportContext(logger: Logger(label: "bench", level: .error)))
        try await transport.start()
        let content = NotificationContent(alert: .fields(Alert(title: "Benchmark", body: "Hello from Herald")), badge: 1)
        let bytes = APNsPayload.encode(content)
        let deliveries = (0..<n).map { i in
            Delivery(id: Int64(i), notificationID: "bench", app: "com.example.app", topic: "com.example.app", token: token,
                     user: nil, transport: "apns", content: content, payload: RenderedPayload(body: bytes))
        }
        // Warm up the connections, then measure.
        _ = await transport.deliver(Array(deliveries.prefix(streams * connections)))
        let batch = max(streams * connections * 2, 200)
        let cpuBefore = processCPUSeconds()
        let start = DispatchTime.now().uptimeNanoseconds
        let failures = await deliverInBatches(transport, count: (deliveries.count + batch - 1) / batch, inFlight: 4) { i in
            Array(deliveries[i * batch..<min((i + 1) * batch, deliveries.count)])
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        let cpu = processCPUSeconds() - cpuBefore
        await transport.shutdown()
        return (Double(n) / seconds, cpu / Double(n) * 1e6, failures)
    }

    func h2load(port: Int, connections: Int, jwt: String) throws -> Double {
        let args = ["-n", String(n), "-c", String(connections), "-m", String(streams), "-t", "1",
                    "-d", work + "/payload.json",
                    "-H", "apns-topic: com.example.app", "-H", "apns-push-type: alert", "-H", "apns-priority: 10",
                    "-H", "apns-id: 7b2ad7c4-87e4-4ad1-9dd9-6e4a7f0a5b3c", "-H", "authorization: bearer \(jwt)",
                    "https://127.0.0.1:\(port)/3/device/\(token)"]
        let output = try shell(which("h2load")!, args)
        // "finished in 1.23s, 81234.56 req/s, …" and "requests: … 100000 succeeded"
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
              let rate = line.split(separator: ",").dropFirst().first?.split(separator: " ").first.flatMap({ Double($0) }) else {
            throw Failure(description: "cannot read h2load's output:\n\(output)")
        }
        if let status = output.split(separator: "\n").first(where: { $0.contains("status codes:") }), !status.contains("\(n) 2xx") {
            console.err("bench: h2load: \(status.trimmingWhitespace())")
        }
        return rate
    }

    func makeJWT(certs: String) throws -> String {
        let b64 = { (s: String) in Base64URL.encode(Array(s.utf8)) }
        let input = b64(#"{"alg":"ES256","kid":"ABC123DEFG"}"#) + "." + b64(#"{"iss":"DEF123GHIJ","iat":\#(Int(Date().timeIntervalSince1970))}"#)
        try input.write(toFile: work + "/jwt-input", atomically: true, encoding: .utf8)
        // The simulator checks the signature; nghttpd ignores it. openssl gives a DER signature.
        _ = try shell(which("openssl")!, ["dgst", "-sha256", "-sign", "\(certs)/AuthKey_ABC123DEFG.p8", "-out", work + "/jwt-sig", work + "/jwt-input"])
        let der = [UInt8](try Data(contentsOf: URL(fileURLWithPath: work + "/jwt-sig")))
        return input + "." + Base64URL.encode(DERSignature.raw(der))
    }
}

/// A reference server started for the benchmark.
struct Server {
    let port: Int
    let process: Subprocess

    func stop() { process.stop() }

    static func nghttpd(work: String, certs: String) throws -> Server {
        let port = try Loopback.freePort()
        let process = try Subprocess(which("nghttpd")!, ["--address=127.0.0.1", "-d", work + "/htdocs", String(port),
                                                         certs + "/server.key", certs + "/server.pem"])
        do { try waitForPort(port) } catch { process.stop(); throw error }
        return Server(port: port, process: process)
    }

    static func simulator(certs: String) throws -> Server {
        let executable = try BenchExecutables.herald()
        let port = try Loopback.freePort()
        let process = try Subprocess(executable, ["simulate", "apns-http2", "--port", String(port), "--tls-cert", certs + "/server.pem",
                             "--tls-key", certs + "/server.key", "--auth-key-pub", "ABC123DEFG=\(certs)/AuthKey_ABC123DEFG.pub.pem",
                             "--team", "DEF123GHIJ", "--topic", "com.example.app", "--allow-streams-before-auth"])
        do { try waitForPort(port) } catch { process.stop(); throw error }
        return Server(port: port, process: process)
    }
}

/// Hands `count` batches to `transport`, `inFlight` at a time; returns how many deliveries were
/// not delivered. `batch(i)` makes the i-th batch when it is launched.
func deliverInBatches(_ transport: any Transport, count: Int, inFlight: Int,
                      batch: @escaping @Sendable (Int) -> [Delivery]) async -> Int {
    await withTaskGroup(of: Int.self) { group -> Int in
        var next = 0
        func launch() -> Bool {
            guard next < count else { return false }
            let i = next
            next += 1
            group.addTask { await transport.deliver(batch(i)).filter { if case .delivered = $0 { return false }; return true }.count }
            return true
        }
        for _ in 0..<inFlight where launch() {}
        var failed = 0
        for await f in group {
            failed += f
            _ = launch()
        }
        return failed
    }
}

func waitForPort(_ port: Int, timeout: TimeInterval = 10) throws {
    let end = Date().addingTimeInterval(timeout)
    while Date() < end {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let rc = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        close(fd)
        if rc == 0 { return }
        usleep(20_000)
    }
    throw APNsBenchmark.Failure(description: "nothing listens on 127.0.0.1:\(port)")
}

func which(_ tool: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    let folders: [String] = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin"]
    for dir in folders {
        let path = "\(dir)/\(tool)"
        if FileManager.default.isExecutableFile(atPath: path) { return path }
    }
    return nil
}

@discardableResult
func shell(_ executable: String, _ arguments: [String]) throws -> String {
    let (status, text) = try Subprocess.run(executable, arguments)
    guard status == 0 else {
        throw APNsBenchmark.Failure(description: "\(executable) \(arguments.prefix(3).joined(separator: " ")) … exited with \(status): \(text.suffix(500))")
    }
    return text
}

/// Where the package's scripts are, for the binary run from a checkout.
enum PackageScripts {
    static func path(_ name: String) -> String {
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        for _ in 0..<6 {
            url.deleteLastPathComponent()
            let candidate = url.appendingPathComponent("scripts/\(name)").path
            if FileManager.default.fileExists(atPath: candidate) { return candidate }
        }
        return "scripts/\(name)"
    }
}

/// DER ECDSA signature → raw R‖S (for a JWT signed with the openssl command).
enum DERSignature {
    static func raw(_ der: [UInt8]) -> [UInt8] {
        var i = 2
        if der[1] & 0x80 != 0 { i += Int(der[1] & 0x7F) }
        func integer() -> [UInt8] {
            let length = Int(der[i + 1])
            var value = Array(der[(i + 2)..<(i + 2 + length)])
            i += 2 + length
            while value.count > 32 && value.first == 0 { value.removeFirst() }
            return Array(repeating: 0, count: 32 - value.count) + value
        }
        return integer() + integer()
    }
}
