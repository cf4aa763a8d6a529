import FoundationEssentials
import HeraldAPNs
import HeraldCLI
import HeraldCore
import HeraldServer
#if canImport(Glibc)
import Glibc
#endif

/// `herald-bench stream-client`: the load client as a process of its own (a server and 10,000
/// clients do not fit in one process's descriptors), and `herald-bench stream-http`: the HTTP
/// layer alone with N open streams (memory per stream, /healthz latency, one write to every stream).
enum StreamBench {
    static let clientSpec = CommandSpec(
        path: "stream-client",
        summary: "Open N event streams to a URL and report when events arrive (a load client).",
        usage: "stream-client (--url URL ... | --url-file FILE) [--n N] [--header 'Name: value' ...] [--until-event ID] [--ack [--ack-keep-alive]] [--storm | --paced] [--timeout S]",
        options: [
            .value("url", "URL", "http://host:port/path to open (IPv4 literal or localhost); several are used in turn", repeatable: true),
            .value("url-file", "FILE", "URLs to open, one per line (e.g. one client token each), after any --url"),
            .value("n", "N", "connections (default: one per URL)"),
            .value("header", "H", "an extra request header, 'Name: value'", repeatable: true),
            .value("until-event", "ID", "exit once every open stream has received the event with this id"),
            .value("timeout", "S", "exit after S seconds in any case (default 300)"),
            .flag("ack", "acknowledge as Herald's acking clients do: open each stream with ack=1 and answer every event with POST /v1/stream/ack (same query)"),
            .flag("ack-keep-alive", "with --ack: send the acknowledgements on up to 256 kept-alive connections (default: a connection each, closed after its answer)"),
            .flag("storm", "open every connection at once (a reconnect storm; default: at most 256 waiting for their status line)"),
            .flag("paced", "at most 256 waiting for their status line (the default), with --storm's report"),
        ],
        discussion: """
        Writes lines to standard output: `connected streaming=<n> failed=<n> statuses=<status:count,...>`
        once every connection has its status line (or failed); with --storm or --paced then
        `storm streaming=<n> refused503=<n> retry_after=<n> failed=<n> other=<n> p50=<s> p99=<s> max=<s>`
        once every stream has its first comment (`: connected`): the seconds from each connect's start
        to that comment, and how many 503 answers carried Retry-After; then, for --until-event,
        `event <id> count=<n> first=<t> p50=<t> p99=<t> last=<t> disconnects=<n>` with arrival
        times in CLOCK_MONOTONIC seconds (comparable with the server's on the same machine).
        With --ack, the path's `/v1/stream` becomes `/v1/stream/ack` for the acknowledgements, and
        the line goes on with `acked=<n> ack_failures=<n> ack_statuses=<status:count,...> ack_last=<t>`
        (ack_last: when the last acknowledgement's answer arrived), written once every
        acknowledgement was answered.
        """)

    static let client = HeraldCLI.Command(spec: clientSpec) { arguments, context throws(CLIError) in
        var urls = arguments.all("url")
        if let file = arguments.value("url-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw .usage("--url-file: cannot read \(file)", command: clientSpec.path)
            }
            urls += text.split(separator: "\n").map { $0.trimmingWhitespace() }.filter { !$0.isEmpty }
        }
        guard !urls.isEmpty else { throw .usage("--url or --url-file is required", command: clientSpec.path) }
        let n = try arguments.int("n", command: clientSpec.path, in: 1...100_000) ?? urls.count
        let timeout = Double(try arguments.int("timeout", command: clientSpec.path, in: 1...86_400) ?? 300)
        var headers: [(String, String)] = []
        for h in arguments.all("header") {
            guard let colon = h.firstIndex(of: ":") else { throw .usage("--header: expected 'Name: value', got \(h)", command: clientSpec.path) }
            headers.append((String(h[..<colon]), h[h.index(after: colon)...].trimmingWhitespace()))
        }
        let acking = arguments.flag("ack")
        var targets: [StreamLoadClient.Target] = []
        for i in 0..<n {
            guard var t = StreamLoadClient.Target(url: urls[i % urls.count], headers: headers) else {
                throw .usage("--url: expected http://host:port/path, got \(urls[i % urls.count])", command: clientSpec.path)
            }
            if acking {
                let query = t.path.firstIndex(of: "?")
                let path = query.map { String(t.path[..<$0]) } ?? t.path
                let rest = query.map { String(t.path[t.path.index(after: $0)...]) } ?? ""
                t.path = path + "?" + (rest.isEmpty ? "ack=1" : rest + "&ack=1")
                t.ackPath = path + "/ack" + (rest.isEmpty ? "" : "?" + rest)
            }
            targets.append(t)
        }
        raiseOpenFileLimit()
        let wanted = arguments.value("until-event")
        var arrivals: [Double] = []
        let storm = arguments.flag("storm"), paced = arguments.flag("paced")
        let client = StreamLoadClient(targets: targets, maxPendingConnects: storm ? n : 256, keepAliveAcks: arguments.flag("ack-keep-alive")) { event in
            if event.id == wanted { arrivals.append(event.arrival) }
        }
        let end = StreamLoadClient.now() + timeout
        var reportedConnect = false, reportedStorm = !(storm || paced)
        client.run { () -> Bool in
            let c = client.counters
            if !reportedConnect, c.statuses.values.reduce(0, +) + c.failedConnects == n {
                reportedConnect = true
                let statuses = c.statuses.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
                context.console.out("connected streaming=\(c.streaming) failed=\(c.failedConnects) statuses=\(statuses)")
            }
            if reportedConnect, !reportedStorm, client.connectTimes.count >= (c.statuses[200] ?? 0) || StreamLoadClient.now() > end {
                reportedStorm = true
                let sorted = client.connectTimes.sorted()
                func at(_ q: Double) -> String { sorted.isEmpty ? "-" : String(sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q))]) }
                let ok = c.statuses[200] ?? 0, refused = c.statuses[503] ?? 0
                context.console.out("storm streaming=\(c.streaming) refused503=\(refused) retry_after=\(client.retryAfterAnswers) failed=\(c.failedConnects) "
                                    + "other=\(c.statuses.values.reduce(0, +) - ok - refused) p50=\(at(0.5)) p99=\(at(0.99)) max=\(at(1))")
            }
            if StreamLoadClient.now() > end { return true }
            if wanted == nil && (storm || paced) { return reportedStorm }
            return wanted != nil && reportedConnect && arrivals.count >= c.streaming && c.acksPending == 0
        }
        if let wanted {
            let sorted = arrivals.sorted()
            func at(_ q: Double) -> String { sorted.isEmpty ? "-" : String(sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * q))]) }
            let c = client.counters
            var line = "event \(wanted) count=\(sorted.count) first=\(at(0)) p50=\(at(0.5)) p99=\(at(0.99)) last=\(at(1)) disconnects=\(c.disconnects)"
            if acking {
                let statuses = c.ackStatuses.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")
                line += " acked=\(c.ackStatuses[204] ?? 0) ack_failures=\(c.ackFailures) ack_statuses=\(statuses) ack_last=\(c.lastAckAnswer)"
            }
            context.console.out(line)
        }
        client.closeAll()
    }

    static let httpSpec = CommandSpec(
        path: "stream-http",
        summary: "Hold N open streams on the HTTP server alone: memory per stream, /healthz latency, one write to all.",
        usage: "stream-http [--n N] [--memory BYTES]",
        options: [
            .value("n", "N", "streams (default 10000)"),
            .value("memory", "BYTES", "libmicrohttpd's memory per connection (default: the server's, 16384)"),
        ],
        discussion: """
        Starts the daemon's HTTP server on 127.0.0.1 with a test endpoint (an event stream with the
        15 s heartbeat) and /healthz, opens N streams from a `herald-bench stream-client` child
        process, and prints: the server process's resident memory per open stream (target at most
        16 KB; Centrifugo reports 27-30 KB per connection, Mercure about 25 KB), /healthz latency with
        every stream open (200 requests, a connection each), and the time from writing one event to
        every stream until the last client has it.
        """)

    static let http = HeraldCLI.Command(spec: httpSpec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: httpSpec.path, in: 1...100_000) ?? 10_000
        var options = HTTPServer.Options(connectionLimit: 256)
        options.maxStreams = n
        if let memory = try arguments.int("memory", command: httpSpec.path, in: 1024...1 << 20) { options.connectionMemoryLimit = memory }
        options.isStreamRequest = { _, path in path == "/stream" }
        let streams = Locked<[HTTPStream]>([])
        let server = HTTPServer(options: options, logger: .disabled, metrics: MetricsRegistry(), immediate: { request in
            switch request.path {
            case "/healthz": return HTTPResponse(status: 200, body: Array("{\"status\":\"ok\"}\n".utf8))
            case "/stream": return .eventStream { stream in streams.withLock { $0.append(stream) } }
            default: return HTTPResponse(status: 404)
            }
        }) { _ in HTTPResponse(status: 404) }
        let port: Int
        do { port = try server.start(ListenAddress(host: "127.0.0.1", port: 0)) } catch let error as HTTPServerError { throw .runtime(error.message) } catch { throw .runtime("\(error)") }
        let before = residentBytes()
        let console = context.console
        do {
            let child = try ChildLines(BenchExecutables.bench(), ["stream-client", "--url", "http://127.0.0.1:\(port)/stream",
                                                          "--n", "\(n)", "--until-event", "1", "--timeout", "300"])
            guard let connected = child.next(prefix: "connected") else { throw CLIError.runtime("the stream client ended early") }
            console.out(connected)
            let deadline = StreamLoadClient.now() + 60
            while server.openStreams < n, StreamLoadClient.now() < deadline { usleep(10_000) }
            usleep(500_000)  // let allocations settle
            let open = server.openStreams
            let after = residentBytes()
            let perStream = open > 0 ? Double(after - before) / Double(open) / 1024 : 0
            console.out("open streams: \(open)")
            console.out("server RSS: \(before / 1024) KB before, \(after / 1024) KB with the streams: \(perStream.fixed(1)) KB per stream (target <= 16 KB; Centrifugo 27-30 KB, Mercure ~25 KB as published)")
            var latencies: [Double] = []
            for _ in 0..<200 {
                let t = StreamLoadClient.now()
                guard get(port: port, path: "/healthz") == 200 else { throw CLIError.runtime("/healthz did not answer 200 with \(open) streams open") }
                latencies.append(StreamLoadClient.now() - t)
            }
            latencies.sort()
            console.out("/healthz with \(open) streams open: p50 \((latencies[100] * 1000).fixed(2)) ms, p99 \((latencies[197] * 1000).fixed(2)) ms, max \((latencies[199] * 1000).fixed(2)) ms")
            let event = Array("id: 1\nevent: notification\ndata: {\"alert\":\"hello\"}\n\n".utf8)
            let stolenBefore = StolenTime.milliseconds()
            let t0 = StreamLoadClient.now()
            for stream in streams.value { stream.write(event) }
            let written = StreamLoadClient.now()
            let all = streams.value
            while all.contains(where: { $0.unsentBytes > 0 }), StreamLoadClient.now() < written + 30 { usleep(1_000) }
            let taken = StreamLoadClient.now()
            guard let line = child.next(prefix: "event") else { throw CLIError.runtime("the stream client ended before reporting the event") }
            let stolen = StolenTime.milliseconds() - stolenBefore
            let fields = Dictionary(line.split(separator: " ").compactMap { part -> (String, String)? in
                let kv = part.split(separator: "=", maxSplits: 1)
                return kv.count == 2 ? (String(kv[0]), String(kv[1])) : nil
            }, uniquingKeysWith: { a, _ in a })
            func ms(_ key: String) -> String { Double(fields[key] ?? "").map { (($0 - t0) * 1000).fixed(1) } ?? "-" }
            console.out("one event to every stream: written in \(((written - t0) * 1000).fixed(1)) ms, taken by the server thread in \(((taken - t0) * 1000).fixed(1)) ms; received by \(fields["count"] ?? "?") clients: p50 \(ms("p50")) ms, p99 \(ms("p99")) ms, last \(ms("last")) ms (disconnects \(fields["disconnects"] ?? "?")); CPU time stolen by the hypervisor meanwhile (all cores): \(stolen.fixed(0)) ms")
            _ = child.finish()
        } catch let error as CLIError {
            await server.stop(deadline: 1)
            throw error
        } catch {
            await server.stop(deadline: 1)
            throw .runtime("benchmark failed: \(error)")
        }
        await server.stop(deadline: 5)
    }

    /// Raises the soft limit of open files to the hard one.
    static func raiseOpenFileLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        setrlimit(resource, &limit)
    }

    /// This process's resident memory (VmRSS), in bytes.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }
        return 0
    }

    /// One GET on a connection of its own; the status, or 0.
    static func get(port: Int, path: String) -> Int {
        (try? BenchHTTP.exchange(port: port, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").status) ?? 0
    }
}

/// A child process whose output is read line by line.
private final class ChildLines {
    private let process: Subprocess
    private let fd: Int32
    private var buffer: [UInt8] = []

    init(_ executable: String, _ arguments: [String]) throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw CLIError.runtime("pipe: \(String(cString: strerror(errno)))") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        do {
            process = try Subprocess(executable, arguments, output: fds[1])
        } catch {
            close(fds[0]); close(fds[1])
            throw error
        }
        close(fds[1])
        fd = fds[0]
    }

    /// The next line that starts with `prefix` (others are skipped), or nil at the end.
    func next(prefix: String) -> String? {
        while true {
            if let newline = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                if line.hasPrefix(prefix) { return line }
                continue
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            buffer += chunk[0..<n]
        }
    }

    /// Waits for the child to exit. - Returns: its exit status.
    func finish() -> Int32 {
        close(fd)
        return process.wait()
    }
}
