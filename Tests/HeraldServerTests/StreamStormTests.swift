import Foundation
import HeraldCore
import HeraldCrypto
import HeraldLocalTransport
import HeraldPostgres
@testable import HeraldServer
import HeraldSQLite
import HeraldTestKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 37, "a storm held": 5,000 live streams opened in one instant (every open app reconnecting
/// after a deploy) on one daemon, on SQLite and on PostgreSQL. Every one connects, and `/healthz`
/// answers within 100 ms in the middle of it.
///
/// Arranged so that it hits the burst every time: the 5,000 connections are opened first and
/// held until the server has accepted them all, none with a byte sent, and only then do the
/// 5,000 requests go, in one loop. So the server holds 5,000 connections whose requests it has
/// not read, five times the API's `connectionLimit` (1,024), and then reads 5,000 requests at
/// once. On main it closed all but about a thousand at accept, with no status (the slowloris
/// defence took unread requests for slow ones).
@Suite(.serialized, .stopsDaemons) struct StreamStormTests {
    static let app = "com.example.app"
    static let secret = "storm-secret-0123456789abcdef-0123456789"
    static let n = 5_000

    static func config(storage: String, maxStreams: Int = 6_000) -> String {
        """
        {
          "storage": \(storage),
          "apps": {"\(app)": {"routes": ["live"], "foreground": "local-only", "clientSecret": "\(secret)"}},
          "transports": {"live": {"type": "local"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "\(TestDaemon.key)", "scopes": ["admin", "send"]}],
                  "streams": {"maxStreams": \(maxStreams)}},
          "server": {"maintenanceInterval": "1h"},
          "log": {"level": "info"}
        }
        """
    }

    /// A daemon in this process with the real local transport, on `drivers`.
    static func start(_ config: String, drivers: StorageDrivers) async throws -> TestDaemon {
        var registry = TransportRegistry()
        registry.register(LocalTransport.self)
        let directory = try TemporaryDirectory(prefix: "herald-storm")
        let configuration = try DaemonConfiguration.parse(Data(config.utf8), baseDirectory: directory.path, registry: registry, environment: [:])
        let logs = RecordingLogHandler()
        let daemon = Daemon(configuration: configuration, registry: registry, storage: drivers, logSink: logs,
                            options: Daemon.Options(random: { 0.5 }, environment: [:]))
        let port = try await daemon.start()
        let started = TestDaemon(directory: directory, daemon: daemon, port: port, logs: logs)
        StopsDaemons.current?.withLock { $0.append(started) }
        return started
    }

    static func raiseFileLimit() throws {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        try #require(limit.rlim_cur >= rlim_t(2 * n + 1_000), "\(n) client and \(n) server sockets need descriptors (RLIMIT_NOFILE \(limit.rlim_cur))")
    }

    @Test(.timeLimit(.minutes(3))) func fiveThousandStreamsAtOnceAllConnectOnSQLite() async throws {
        try Self.raiseFileLimit()
        let d = try await Self.start(Self.config(storage: #"{"path": "herald.db", "synchronous": "normal"}"#), drivers: .embedded)
        try await Self.storm(d)
    }

    @Test(.timeLimit(.minutes(3))) func fiveThousandStreamsAtOnceAllConnectOnPostgreSQL() async throws {
        try Self.raiseFileLimit()
        let url = try await PostgresServer.shared().createDatabase()
        var drivers = StorageDrivers.embedded
        drivers.register(PostgresStorageDriver())
        let d = try await Self.start(Self.config(storage: #"{"driver": "postgresql", "url": "\#(url)", "pool": 4}"#), drivers: drivers)
        try await Self.storm(d)
    }

    /// 1,500 at once past a `maxStreams` of 1,000: 1,000 streams, and 500 answered
    /// `503 too_many_streams` with `Retry-After`, none closed bare (on main: closed with no status).
    @Test(.timeLimit(.minutes(3))) func pastMaxStreamsAStormIsAnswered503WithRetryAfterNeverClosedBare() async throws {
        try Self.raiseFileLimit()
        let d = try await Self.start(Self.config(storage: #"{"path": "herald.db", "synchronous": "normal"}"#, maxStreams: 1_000), drivers: .embedded)
        let server = try #require(d.daemon.running.withLock { $0?.server })
        let baseline = server.connectionCounts.connections
        let requests = Self.requests(1_500)
        let outcome = try await offPool {
            try Storm.run(port: d.port, requests: requests, prober: HealthProber(port: d.port)) {
                server.connectionCounts.connections - baseline >= 1_500
            }
        }
        #expect(outcome.connected == 1_000, "\(outcome.statuses)")
        #expect(outcome.statuses == [200: 1_000, 503: 500], "\(outcome.statuses)")
        #expect(outcome.retryAfter == 500)
        #expect(outcome.closedBare == 0)
        outcome.close()
    }

    /// `count` stream requests, one user and device each.
    static func requests(_ count: Int) -> [[UInt8]] {
        let now = Date()
        return (0..<count).map { i in
            let device = String(format: "%032x", i)
            let claims = ClientTokenClaims(user: "u\(i)", app: app, device: device, issuedAt: now, expiresAt: now.addingTimeInterval(3600))
            let token = ClientToken.sign(claims, secret: Secret(secret))
            return Array("GET /v1/stream?app=\(app) HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer \(token)\r\n\r\n".utf8)
        }
    }

    static func storm(_ d: TestDaemon) async throws {
        let requests = requests(n)
        let server = try #require(d.daemon.running.withLock { $0?.server })
        let baseline = server.connectionCounts.connections
        let port = d.port
        let prober = HealthProber(port: port)
        let outcome = try await offPool {
            try Storm.run(port: port, requests: requests, prober: prober) {
                // Every connection accepted (none read: no byte was sent), besides the prober's.
                server.connectionCounts.connections - baseline >= n
            }
        }
        let probes = prober.results
        // Every stream connected: a 200 and its `: connected`, none refused, none closed bare.
        #expect(outcome.connected == n, "connected \(outcome.connected) of \(n); statuses \(outcome.statuses), closed with no answer \(outcome.closedBare)")
        #expect(outcome.closedBare == 0)
        #expect(outcome.statuses == [200: n], "\(outcome.statuses)")
        #expect(await eventually(timeout: 20) { server.openStreams == n }, "\(server.openStreams) streams open")
        // /healthz and /readyz in the middle of it: asked while the requests were being read and answered.
        let during = probes.filter { $0.start >= outcome.burst && $0.start < outcome.lastConnected }
        let health = during.filter { $0.path == "/healthz" }, ready = during.filter { $0.path == "/readyz" }
        #expect(!health.isEmpty && !ready.isEmpty, "no /healthz or /readyz between the burst and the last `: connected` (\(probes.count) probes)")
        #expect(health.allSatisfy { $0.ok && $0.seconds <= 0.1 },
                "/healthz during the storm: \(health.map { "\($0.ok ? 200 : 0) in \(Int($0.seconds * 1000)) ms" })")
        #expect(ready.allSatisfy { $0.ok }, "/readyz during the storm: \(ready.map { "\($0.ok ? 200 : 0) in \(Int($0.seconds * 1000)) ms" })")
        // Nothing closed for being one of many.
        let metrics = try await d.client.get("/metrics").text
        let shed = metrics.split(separator: "\n").filter { $0.hasPrefix("herald_http_connections_shed_total{") && !$0.hasSuffix(" 0") }
        #expect(shed.isEmpty, "\(shed)")
        let times = outcome.times.sorted()
        let p99 = times.isEmpty ? 0 : times[min(times.count - 1, Int(Double(times.count - 1) * 0.99))]
        print("storm: \(n) streams at once: \(outcome.connected) connected, from the burst to `: connected` p99 \(Int(p99 * 1000)) ms, last \(Int((outcome.lastConnected - outcome.burst) * 1000)) ms; /healthz during it: \(health.map { Int($0.seconds * 1000) }) ms; /readyz: \(ready.map { Int($0.seconds * 1000) }) ms")
        outcome.close()
    }
}

/// Asks `/healthz` and `/readyz` in turn over a new connection every 10 ms on a thread of its
/// own, each answer timed.
final class HealthProber: @unchecked Sendable {
    struct Probe: Sendable {
        var path: String
        var start: Double
        var seconds: Double
        var ok: Bool
    }

    private let port: Int
    private let state = Locked<(running: Bool, probes: [Probe])>((false, []))
    private let done = DispatchSemaphore(value: 0)

    init(port: Int) { self.port = port }

    var results: [Probe] { state.withLock { $0.probes } }

    func start() {
        state.withLock { $0.running = true }
        let port = port, state = state, done = done
        Thread {
            var turn = 0
            while state.withLock({ $0.running }) {
                let path = turn % 2 == 0 ? "/healthz" : "/readyz"
                turn += 1
                let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
                let start = Storm.now()
                var ok = false
                if let fd = try? Loopback.connect(port: port, receiveTimeout: 5) {
                    _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    var buffer = [UInt8](repeating: 0, count: 512)
                    let n = recv(fd, &buffer, buffer.count, 0)
                    ok = n > 12 && String(decoding: buffer[0..<12], as: UTF8.self) == "HTTP/1.1 200"
                    close(fd)
                }
                let probe = Probe(path: path, start: start, seconds: Storm.now() - start, ok: ok)
                state.withLock { $0.probes.append(probe) }
                usleep(10_000)
            }
            done.signal()
        }.start()
    }

    func stop() {
        guard state.withLock({ s in defer { s.running = false }; return s.running }) else { return }
        done.wait()
    }
}

/// A storm of stream requests on one thread with `poll()`: every connection is opened and
/// held until `accepted` says the server has them all, then every request is sent in one loop,
/// and each answer is read up to its `: connected` (or its status, or a close).
enum Storm {
    struct Outcome: Sendable {
        var fds: [Int32] = []
        /// Streams whose 200 and `: connected` arrived.
        var connected = 0
        var statuses: [Int: Int] = [:]
        /// Connections closed before a status line.
        var closedBare = 0
        /// Answers other than 200 that carried `Retry-After`.
        var retryAfter = 0
        /// Seconds from the burst to each `: connected`.
        var times: [Double] = []
        /// When the requests went (CLOCK_MONOTONIC seconds), and when the last `: connected` came.
        var burst = 0.0
        var lastConnected = 0.0

        func close() { fds.forEach { _ = Glibc.close($0) } }
    }

    static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    struct Failure: Error, CustomStringConvertible { var description: String }

    static func run(port: Int, requests: [[UInt8]], prober: HealthProber, accepted: () -> Bool) throws -> Outcome {
        var outcome = Outcome()
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        for i in requests.indices {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { outcome.close(); throw Failure(description: "socket \(i): \(String(cString: strerror(errno)))") }
            outcome.fds.append(fd)
            let rc = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard rc == 0 || errno == EINPROGRESS else { outcome.close(); throw Failure(description: "connect \(i): \(String(cString: strerror(errno)))") }
        }
        // The server accepts them all before any request is sent (a kernel's backlog drop costs a
        // retry, a second; the bound leaves room for that).
        let acceptDeadline = now() + 30
        while !accepted() {
            guard now() < acceptDeadline else { outcome.close(); throw Failure(description: "the server did not accept \(requests.count) connections in 30 s") }
            usleep(10_000)
        }
        prober.start()
        usleep(50_000)
        outcome.burst = now()
        for (i, request) in requests.enumerated() {
            let sent = request.withUnsafeBytes { send(outcome.fds[i], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent == request.count else { outcome.close(); throw Failure(description: "request \(i): sent \(sent) of \(request.count) bytes") }
        }
        var received = [[UInt8]](repeating: [], count: requests.count)
        var open = Array(requests.indices)
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        let marker = Array(": connected\n".utf8)
        let deadline = now() + 60
        while !open.isEmpty && now() < deadline {
            var polled = open.map { pollfd(fd: outcome.fds[$0], events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polled, nfds_t(polled.count), 100)
            guard ready > 0 else { continue }
            var still: [Int] = []
            for (k, i) in open.enumerated() {
                guard polled[k].revents != 0 else { still.append(i); continue }
                let fd = outcome.fds[i]
                var closed = false
                while true {
                    let r = recv(fd, &buffer, buffer.count, 0)
                    if r > 0 { received[i] += buffer[0..<r]; continue }
                    if r == 0 || (errno != EAGAIN && errno != EINTR) { closed = true }
                    break
                }
                let text = received[i]
                if let end = text.firstRange(of: Array("\r\n\r\n".utf8)) {
                    let status = text.count >= 12 ? Int(String(decoding: text[9..<12], as: UTF8.self)) ?? 0 : 0
                    if status != 200 {
                        outcome.statuses[status, default: 0] += 1
                        if String(decoding: text[..<end.lowerBound], as: UTF8.self).lowercased().contains("\r\nretry-after: ") { outcome.retryAfter += 1 }
                    } else if text[end.upperBound...].firstRange(of: marker) != nil {
                        let t = now()
                        outcome.statuses[200, default: 0] += 1
                        outcome.connected += 1
                        outcome.times.append(t - outcome.burst)
                        outcome.lastConnected = max(outcome.lastConnected, t)
                        received[i] = []
                    } else if closed {
                        outcome.statuses[200, default: 0] += 1
                    } else {
                        still.append(i)
                    }
                } else if closed {
                    outcome.closedBare += 1
                } else {
                    still.append(i)
                }
            }
            open = still
            // Read in batches: a poll over thousands of sockets per answer would take a core the
            // daemon and the prober share.
            usleep(5_000)
        }
        // A little past the last `: connected`, so that probes after it are not "during".
        usleep(100_000)
        prober.stop()
        if outcome.lastConnected == 0 { outcome.lastConnected = now() }
        return outcome
    }
}
