import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCLI
import HeraldCore
import HeraldCrypto
import HeraldTestKit

/// `herald-bench stream`: N live streams on one real daemon (`herald serve`), held by the load
/// client in a process of its own, then one notification to all N users: the daemon's memory per
/// open stream, the time from the API's 202 until the clients have it, and `/healthz` latency
/// throughout. Printed next to the HTTP layer alone writing one event to N streams
/// (`herald-bench stream-http`), measured in the same run.
enum StreamDaemonBench {
    static let spec = CommandSpec(
        path: "stream",
        summary: "N live streams on one daemon: memory per stream, 202-to-client latency of one notification to all, /healthz meanwhile, close-to-absent time, ack round trip.",
        usage: "stream [--n N] [--synchronous full|normal] [--batch-size B] [--work DIR] [--no-acks | --acks-keep-alive] [--full-inboxes] [--no-reference] | stream --storm N [--max-streams M] [--work DIR]",
        options: [
            .value("n", "N", "streams, one user and device each (default 10000)"),
            .value("storm", "N", "instead: open N streams in one instant (a reconnect storm) and report connected, refused with 503, p99 time to `: connected` and /healthz's max latency"),
            .value("max-streams", "M", "with --storm: the daemon's api.streams.maxStreams (default N + 300)"),
            .value("synchronous", "MODE", "the daemon's storage.synchronous (default full: each commit fsynced)"),
            .value("batch-size", "B", "the daemon's delivery.batchSize (default 500, the daemon's; the local transport takes up to 2000)"),
            .value("work", "DIR", "folder for the daemon's config, database and logs (default: a new folder under /tmp)"),
            .flag("no-acks", "the N streams do not acknowledge (default: they open with ack=1 and acknowledge every event)"),
            .flag("acks-keep-alive", "the acknowledgements go as requests on up to 256 kept-alive connections (default: a connection each)"),
            .flag("full-inboxes", "every user's inbox is full when the measured notification is numbered (inbox.maxPerUser 1 and one notification to all before it), so that each append also trims"),
            .flag("no-reference", "skip the HTTP layer's own run (herald-bench stream-http)"),
        ],
        discussion: """
        Starts `herald serve` on 127.0.0.1 with one app whose foreground policy is local-only, mints a
        client token per user, opens N streams with `herald-bench stream-client` (another process: one
        process cannot hold both ends under the descriptor limit), measures the daemon's resident
        memory before and with the streams, sends one notification to all N users with
        POST /v1/notifications, and reports when the clients had it (p50, p99, last) counted from the
        API's 202 and from the POST (the accept's own time printed beside them), with the daemon's CPU
        time over the broadcast (from /proc), while a prober asks /healthz every 20 ms. The N clients acknowledge (ack=1, a
        POST /v1/stream/ack per event) unless --no-acks; then the report adds when the last ack was
        answered and when the daemon had recorded every delivery `delivered`. Then, with every stream still open, it
        opens 100 more streams and closes them one by one (FIN and RST in turn), timing each close
        until the daemon counts the device as absent, and times an acknowledging client (ack=1): the
        ack's round trip and the 202 to `delivered`. With --full-inboxes the app keeps one inbox entry per user
        and every user gets one notification first (answered before the measured one): the measured
        append then drops each user's oldest entry, as it does in a daemon that has run for a while. Targets: at most 16 KB per stream, p99 at most
        250 ms, close to absent p99 at most 100 ms.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 1...20_000) ?? 10_000
        let work = arguments.value("work")
        if let storm = try arguments.int("storm", command: spec.path, in: 1...20_000) {
            let maxStreams = try arguments.int("max-streams", command: spec.path, in: 1...1_000_000) ?? storm + 300
            do {
                try await Run(n: storm, console: context.console, work: work, synchronous: "full", batchSize: 500, acking: false)
                    .storm(maxStreams: maxStreams)
            } catch {
                throw .runtime("benchmark failed: \(error)")
            }
            return
        }
        do {
            let synchronous = arguments.value("synchronous") ?? "full"
            guard ["full", "normal"].contains(synchronous) else { throw CLIError.usage("--synchronous: expected full or normal", command: spec.path) }
            let batch = try arguments.int("batch-size", command: spec.path, in: 1...10_000) ?? 500
            try await Run(n: n, console: context.console, work: work, synchronous: synchronous, batchSize: batch,
                          acking: !arguments.flag("no-acks"), acksKeepAlive: arguments.flag("acks-keep-alive"),
                          fullInboxes: arguments.flag("full-inboxes"))
                .run(reference: !arguments.flag("no-reference"))
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }

    struct Failure: Error, CustomStringConvertible { var description: String }

    struct Run {
        let n: Int
        let console: Console
        let work: String?
        let app = "bench.stream"
        let secret = UUIDSource.random().lowercasedString + UUIDSource.random().lowercasedString
        let apiKey = "bench-key-" + UUIDSource.random().lowercasedString
        let synchronous: String
        let batchSize: Int
        /// The N streams acknowledge every event.
        let acking: Bool
        /// On kept-alive connections (up to 256), not a connection each.
        var acksKeepAlive = false
        /// One inbox entry kept per user, and one notification to all before the measured one.
        var fullInboxes = false
        /// The event id the measured notification has at every stream.
        var measuredEvent: Int { fullInboxes ? 2 : 1 }

        func run(reference: Bool) async throws {
            let dir = try work ?? makeTemporaryFolder()
            let herald = try BenchExecutables.herald(), bench = BenchExecutables.bench()
            let port = try Loopback.freePort()
            let config = """
            {"storage": {"path": "\(dir)/herald.db", "synchronous": "\(synchronous)"},
             "apps": {"\(app)": {"routes": ["live", "log"], "foreground": "local-only", "clientSecret": "\(secret)"\(fullInboxes ? #", "inbox": {"maxPerUser": 1}"# : "")}},
             "transports": {"live": {"type": "local"}, "log": {"type": "log", "path": "\(dir)/push.jsonl"}},
             "api": {"listen": "127.0.0.1:\(port)", "keys": [{"id": "bench", "secret": "\(apiKey)", "scopes": ["send", "admin"]}],
                     "maxBodyBytes": 4194304, "streams": {"maxStreams": \(max(n, 1) + 300)}},
             "delivery": {"batchSize": \(batchSize)},
             "log": {"level": "warning"}}
            """
            try write(config, to: "\(dir)/config.json")
            let daemonLog = open("\(dir)/daemon.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            let daemon = try Subprocess(herald, ["serve", "--config", "\(dir)/config.json"], output: daemonLog)
            close(daemonLog)
            defer { daemon.stop() }
            try waitFor(file: "\(dir)/daemon.log", containing: "listening", timeout: 30)
            let base = residentKB(daemon.pid)

            // One user and device per stream; the token in the URL (as a browser sends it).
            let now = Date()
            var urls = ""
            for i in 0..<n {
                let claims = ClientTokenClaims(user: "u\(i)", app: app, device: device(i), issuedAt: now,
                                               expiresAt: now.addingTimeInterval(3600))
                urls += "http://127.0.0.1:\(port)/v1/stream?app=\(app)&access_token=\(ClientToken.sign(claims, secret: Secret(secret)))\n"
            }
            try write(urls, to: "\(dir)/urls.txt")
            let clientLog = open("\(dir)/client.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            let client = try Subprocess(bench, ["stream-client", "--url-file", "\(dir)/urls.txt", "--until-event", "\(measuredEvent)",
                                                 "--timeout", "300"] + (acking ? ["--ack"] : []) + (acking && acksKeepAlive ? ["--ack-keep-alive"] : []), output: clientLog)
            close(clientLog)
            defer { client.stop() }
            let connected = try waitFor(file: "\(dir)/client.log", containing: "connected ", timeout: 180)
            guard connected.contains("streaming=\(n) ") else { throw Failure(description: "not every stream opened: \(connected)") }
            // The daemon registers a stream once its replay is done: wait until it counts them all.
            let started = monotonic()
            while try metric(port: port, "herald_streams_open") < Double(n) {
                if monotonic() - started > 60 { throw Failure(description: "the daemon holds fewer than \(n) streams after 60 s") }
                usleep(50_000)
            }
            let withStreams = residentKB(daemon.pid)
            // With every stream open (the client exits once it has the broadcast): closes (FIN and
            // RST in turn), and an acknowledging client.
            let closes = try closeToAbsent(port: port, open: n, count: 100)
            let (acks, delivered, toClient) = try ackRoundTrips(port: port, count: 50)

            let users = (0..<n).map { "\"u\($0)\"" }.joined(separator: ",")
            if fullInboxes {
                // The first notification to all fills each user's inbox (one entry kept); the
                // measured one starts once the daemon has recorded every delivery of it.
                let before = try deliveredCount(port: port)
                let body = #"{"app":"\#(app)","users":[\#(users)],"alert":{"title":"bench","body":"first"}}"#
                let (status, _) = try post(port: port, path: "/v1/notifications", body: body)
                guard status == 202 else { throw Failure(description: "POST /v1/notifications answered \(status)") }
                let started = monotonic()
                while try deliveredCount(port: port) < before + Double(n) {
                    if monotonic() - started > 120 { throw Failure(description: "the first notification was not delivered to all \(n) streams in 120 s") }
                    usleep(50_000)
                }
            }
            let deliveredBefore = try deliveredCount(port: port)
            let watcher = DeliveredWatcher(port: port, apiKey: apiKey, target: deliveredBefore + Double(n))
            if acking { watcher.start() }
            let prober = HealthProber(port: port)
            prober.start()
            let body = #"{"app":"\#(app)","users":[\#(users)],"alert":{"title":"bench","body":"to everyone"}}"#
            let cpuBefore = cpuMilliseconds(daemon.pid)
            let stolenBefore = StolenTime.milliseconds()
            let posted = StreamDaemonBench.monotonic()
            let (status, accepted) = try post(port: port, path: "/v1/notifications", body: body)
            guard status == 202 else { throw Failure(description: "POST /v1/notifications answered \(status)") }
            let arrivals = try waitFor(file: "\(dir)/client.log", containing: "event \(measuredEvent) ", timeout: 300)
            let broadcastCPU = cpuMilliseconds(daemon.pid) - cpuBefore
            let stolen = StolenTime.milliseconds() - stolenBefore
            let health = prober.stop()
            let allDelivered = acking ? watcher.wait(timeout: 60) : nil
            if ProcessInfo.processInfo.environment["HERALD_BENCH_METRICS"] != nil {
                let (_, text) = try BenchHTTP.exchange(port: port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(apiKey)\r\nConnection: close\r\n\r\n")
                for line in text.split(separator: "\n") where !line.hasPrefix("#") && (line.contains("_sum") || line.contains("_count") || line.contains("stream")) {
                    console.out("  metric \(line)")
                }
            }
            func field(_ name: String) -> Double? {
                arrivals.split(separator: " ").first { $0.hasPrefix(name + "=") }.flatMap { Double($0.dropFirst(name.count + 1)) }
            }
            let count = Int(field("count") ?? 0)
            let perStream = Double(withStreams - base) * 1024 / Double(n)
            let cores = ProcessInfo.processInfo.activeProcessorCount
            console.out("== bench stream: \(n) streams on one daemon (\(cores) cores, storage.synchronous=\(synchronous), delivery.batchSize=\(batchSize), "
                        + (fullInboxes ? "full inboxes: the measured append trims every user, " : "")
                        + (acking ? "acks on: every stream acknowledges, " + (acksKeepAlive ? "on up to 256 kept-alive connections)" : "a connection per ack)") : "acks off)"))
            let mb = { (kb: Int) in (Double(kb) / 1024).fixed(0) }
            console.out("memory: \(mb(base)) MB before, \(mb(withStreams)) MB with the streams: "
                        + "\((perStream / 1024).fixed(1)) KB per open stream (target ≤ 16 KB)")
            let ms = { (t: Double?) -> String in t.map { "\((($0 - accepted) * 1000).fixed(0)) ms" } ?? "-" }
            let first = ms(field("first")), p50 = ms(field("p50")), p99 = ms(field("p99")), last = ms(field("last"))
            console.out("one notification to all \(n) users, from the 202: first \(first), p50 \(p50), p99 \(p99) (target ≤ 250 ms), "
                        + "last \(last); \(count) of \(n) clients had it, disconnects \(Int(field("disconnects") ?? 0))")
            // The accept's own time (the POST sent to its 202 read): it stores the notification
            // and, for devices with a stream open, numbers and claims their deliveries.
            let fromPost = { (t: Double?) -> String in t.map { "\((($0 - posted) * 1000).fixed(0)) ms" } ?? "-" }
            console.out("  the accept (POST sent to 202 read): \(((accepted - posted) * 1000).fixed(0)) ms; from the POST: "
                        + "p50 \(fromPost(field("p50"))), p99 \(fromPost(field("p99"))), last \(fromPost(field("last")))")
            console.out("  daemon CPU from the POST to the client's report: \(broadcastCPU.fixed(0)) ms, "
                        + "\((broadcastCPU * 1000 / Double(n)).fixed(0)) µs per delivery; CPU time stolen by the hypervisor meanwhile "
                        + "(all cores): \(stolen.fixed(0)) ms")
            if acking {
                console.out("  acks: \(Int(field("acked") ?? 0)) answered 204, \(Int(field("ack_failures") ?? 0)) failed; last ack answered \(ms(field("ack_last"))) "
                            + "after the 202; every delivery recorded delivered \(ms(allDelivered)) after the 202")
            }
            let h50 = (health.p50 * 1000).fixed(1), h99 = (health.p99 * 1000).fixed(1), hmax = (health.max * 1000).fixed(1)
            console.out("/healthz meanwhile: \(health.count) answers, p50 \(h50) ms, p99 \(h99) ms, max \(hmax) ms, failures \(health.failures)")
            console.out("a client's close to its device counting as absent, \(closes.count) closes with \(n) streams open: "
                        + "\(Self.summary(closes)) (target p99 ≤ 100 ms)")
            console.out("an acknowledging client (ack=1) beside them, \(acks.count) notifications: ack round trip (POST /v1/stream/ack to 204) "
                        + "\(Self.summary(acks)); 202 to delivered \(Self.summary(delivered)); POST to the event at the client \(Self.summary(toClient))")
            if reference {
                let (code, output) = try Subprocess.run(bench, ["stream-http", "--n", String(n)])
                console.out("reference (same run): the HTTP layer alone, one event written to \(n) streams:")
                console.out(lines: output.split(separator: "\n").map { "  " + $0 })
                if code != 0 { console.out("  (herald-bench stream-http exited \(code))") }
            }
            if work == nil { _ = try? Subprocess.run("/bin/rm", ["-rf", dir]) }
        }

        /// A 32-hex-digit installation id for stream `i`.
        func device(_ i: Int) -> String {
            let hex = String(i, radix: 16)
            return String(repeating: "0", count: 32 - hex.count) + hex
        }
    }

    // MARK: Helpers

    static func monotonic() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}

extension StreamDaemonBench.Run {
    func makeTemporaryFolder() throws -> String {
        var template = Array("/tmp/herald-bench-stream.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw StreamDaemonBench.Failure(description: "mkdtemp: \(String(cString: strerror(errno)))") }
        return String(cString: made)
    }

    func write(_ text: String, to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StreamDaemonBench.Failure(description: "cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        var done = 0
        while done < bytes.count {
            let w = bytes[done...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            guard w > 0 else { throw StreamDaemonBench.Failure(description: "cannot write \(path)") }
            done += w
        }
    }

    /// Waits until a line of `file` contains `text`; returns that line.
    @discardableResult
    func waitFor(file: String, containing text: String, timeout: Double) throws -> String {
        let end = StreamDaemonBench.monotonic() + timeout
        while StreamDaemonBench.monotonic() < end {
            if let data = FileManager.default.contents(atPath: file) {
                let content = String(decoding: data, as: UTF8.self)
                if let line = content.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            }
            usleep(20_000)
        }
        let tail = FileManager.default.contents(atPath: file).map { String(decoding: $0.suffix(2000), as: UTF8.self) } ?? ""
        throw StreamDaemonBench.Failure(description: "no \"\(text)\" in \(file) after \(Int(timeout)) s: \(tail)")
    }

    /// CPU time (user and system) the process has used, from `/proc/<pid>/stat` (clock ticks).
    func cpuMilliseconds(_ pid: pid_t) -> Double {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return 0 }
        let text = String(decoding: data, as: UTF8.self)
        // Fields after the command (which may hold spaces) start after its closing parenthesis.
        guard let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // utime and stime are fields 14 and 15 of the line: 12 and 13 after the state (field 3).
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) * 1000 / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// VmRSS of a process, in KB.
    func residentKB(_ pid: pid_t) -> Int {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/status") else { return 0 }
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// One value of the daemon's /metrics (0 when absent).
    func metric(port: Int, _ name: String) throws -> Double {
        let (_, text) = try BenchHTTP.exchange(port: port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(apiKey)\r\nConnection: close\r\n\r\n")
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") || $0.hasPrefix(name + "{") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
    }

    /// POSTs JSON; returns the status and the monotonic time the answer arrived.
    func post(port: Int, path: String, body: String) throws -> (Int, Double) {
        let request = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(apiKey)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        let (status, _) = try BenchHTTP.exchange(port: port, request)
        return (status, StreamDaemonBench.monotonic())
    }
}

/// One blocking HTTP/1.1 exchange on a new loopback connection (the benchmark's own requests).
enum BenchHTTP {
    static func exchange(port: Int, _ request: String) throws -> (status: Int, text: String) {
        let fd = try Loopback.connect(port: port, receiveTimeout: 30)
        defer { close(fd) }
        let bytes = Array(request.utf8)
        var sent = 0
        while sent < bytes.count {
            let w = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard w > 0 else { throw StreamDaemonBench.Failure(description: "send: \(String(cString: strerror(errno)))") }
            sent += w
        }
        var answer = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let r = recv(fd, &buffer, buffer.count, 0)
            if r <= 0 { break }
            answer += buffer[0..<r]
        }
        let text = String(decoding: answer, as: UTF8.self)
        let status = Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0
        return (status, text)
    }
}

extension StreamDaemonBench.Run {
    /// The daemon's `delivered` outcomes so far (every transport and reason).
    func deliveredCount(port: Int) throws -> Double {
        try DeliveredWatcher(port: port, apiKey: apiKey, target: 0).count()
    }
}

/// Polls the daemon's `herald_deliveries_total{outcome="delivered"}` every 10 ms on a thread of
/// its own until it reaches a target; keeps when it did (CLOCK_MONOTONIC seconds).
final class DeliveredWatcher: @unchecked Sendable {
    private let port: Int
    private let apiKey: String
    private let target: Double
    private let state = Locked<(running: Bool, reached: Double?)>((false, nil))
    private let thread = BlockingThread(name: "delivered-watcher")
    private var task: Task<Void, Never>?

    init(port: Int, apiKey: String, target: Double) {
        self.port = port
        self.apiKey = apiKey
        self.target = target
    }

    /// The sum of the delivered counters now.
    func count() throws -> Double {
        let (_, text) = try BenchHTTP.exchange(port: port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(apiKey)\r\nConnection: close\r\n\r\n")
        var sum = 0.0
        for line in text.split(separator: "\n") where line.hasPrefix("herald_deliveries_total{") && line.contains("outcome=\"delivered\"") {
            sum += Double(line.split(separator: " ").last ?? "") ?? 0
        }
        return sum
    }

    func start() {
        state.withLock { $0.running = true }
        let state = state, thread = thread
        task = Task { [self] in
            _ = try? await thread.run {
                while state.withLock({ $0.running && $0.reached == nil }) {
                    if let n = try? self.count(), n >= self.target {
                        let now = StreamDaemonBench.monotonic()
                        state.withLock { $0.reached = now }
                    }
                    usleep(10_000)
                }
            }
        }
    }

    /// Waits up to `timeout` seconds for the target; when it was reached, or `nil`.
    func wait(timeout: Double) -> Double? {
        let end = StreamDaemonBench.monotonic() + timeout
        while StreamDaemonBench.monotonic() < end, state.withLock({ $0.running && $0.reached == nil }) { usleep(10_000) }
        state.withLock { $0.running = false }
        usleep(50_000)
        thread.stop()
        return state.withLock { $0.reached }
    }
}

/// Asks /healthz every 20 ms on a thread of its own and keeps the latencies.
final class HealthProber: @unchecked Sendable {
    private let port: Int
    private let state = Locked<(running: Bool, latencies: [Double], failures: Int)>((false, [], 0))
    private let thread = BlockingThread(name: "healthz-prober")
    private var task: Task<Void, Never>?

    init(port: Int) { self.port = port }

    func start() {
        state.withLock { $0.running = true }
        let port = port, state = state, thread = thread
        task = Task {
            _ = try? await thread.run {
                while state.withLock({ $0.running }) {
                    let start = StreamDaemonBench.monotonic()
                    let ok = (try? BenchHTTP.exchange(port: port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").status) == 200
                    let elapsed = StreamDaemonBench.monotonic() - start
                    state.withLock { s in if ok { s.latencies.append(elapsed) } else { s.failures += 1 } }
                    usleep(20_000)
                }
            }
        }
    }

    /// Stops probing; the answers' count, p50, p99 and max (seconds), and failures.
    func stop() -> (count: Int, p50: Double, p99: Double, max: Double, failures: Int) {
        state.withLock { $0.running = false }
        usleep(100_000)
        thread.stop()
        let (latencies, failures) = state.withLock { ($0.latencies.sorted(), $0.failures) }
        func at(_ q: Double) -> Double { latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count - 1) * q))] }
        return (latencies.count, at(0.5), at(0.99), latencies.last ?? 0, failures)
    }
}
