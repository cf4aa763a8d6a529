import FoundationEssentials
import Glibc
import HeraldCore
import HeraldCrypto
import HeraldTestKit

extension StreamDaemonBench.Run {
    /// `herald-bench stream --storm N`: N streams opened in one instant on one real daemon (what
    /// every open app does after a deploy, a network blip or a failover), by the load client in a
    /// process of its own, while a prober asks /healthz every 20 ms. Prints how many connected,
    /// how many were refused with 503 (and carried `Retry-After`), how many got nothing (a bare
    /// close), the time from each connect to its `: connected` (p50, p99, max), and /healthz's
    /// latency throughout. Targets (issue 37): every stream whose request arrives whole is served
    /// up to `maxStreams`, p99 to `: connected` ≤ 1 s, /healthz ≤ 100 ms. The reference, on the
    /// same daemon once the storm's streams have closed: the same N opened 256 at a time.
    func storm(maxStreams: Int) async throws {
        let dir = try work ?? makeTemporaryFolder()
        let herald = try BenchExecutables.herald(), bench = BenchExecutables.bench()
        let port = try Loopback.freePort()
        let config = """
        {"storage": {"path": "\(dir)/herald.db", "synchronous": "\(synchronous)"},
         "apps": {"\(app)": {"routes": ["live", "log"], "foreground": "local-only", "clientSecret": "\(secret)"}},
         "transports": {"live": {"type": "local"}, "log": {"type": "log", "path": "\(dir)/push.jsonl"}},
         "api": {"listen": "127.0.0.1:\(port)", "keys": [{"id": "bench", "secret": "\(apiKey)", "scopes": ["send", "admin"]}],
                 "streams": {"maxStreams": \(maxStreams)}},
         "log": {"level": "warning"}}
        """
        try write(config, to: "\(dir)/config.json")
        let daemonLog = open("\(dir)/daemon.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        let daemon = try Subprocess(herald, ["serve", "--config", "\(dir)/config.json"], output: daemonLog)
        close(daemonLog)
        defer { daemon.stop() }
        try waitFor(file: "\(dir)/daemon.log", containing: "listening", timeout: 30)
        let base = residentKB(daemon.pid)
        let now = Date()
        var urls = ""
        for i in 0..<n {
            let claims = ClientTokenClaims(user: "u\(i)", app: app, device: device(i), issuedAt: now, expiresAt: now.addingTimeInterval(3600))
            urls += "http://127.0.0.1:\(port)/v1/stream?app=\(app)&access_token=\(ClientToken.sign(claims, secret: Secret(secret)))\n"
        }
        try write(urls, to: "\(dir)/urls.txt")
        let prober = HealthProber(port: port)
        prober.start()
        usleep(200_000)
        let cpuBefore = cpuMilliseconds(daemon.pid)
        let clientLog = open("\(dir)/client.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        let client = try Subprocess(bench, ["stream-client", "--url-file", "\(dir)/urls.txt", "--storm", "--timeout", "120"], output: clientLog)
        close(clientLog)
        defer { client.stop() }
        let line = try waitFor(file: "\(dir)/client.log", containing: "storm ", timeout: 150)
        let cpu = cpuMilliseconds(daemon.pid) - cpuBefore
        let health = prober.stop()
        let withStreams = residentKB(daemon.pid)
        // (The client closes its streams and exits once it has reported.)
        // The reference: the same streams opened 256 at a time, once the storm's have closed.
        let closing = StreamDaemonBench.monotonic()
        while try metric(port: port, "herald_streams_open") > 0 && StreamDaemonBench.monotonic() - closing < 60 { usleep(50_000) }
        let referenceLog = open("\(dir)/reference.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        let reference = try Subprocess(bench, ["stream-client", "--url-file", "\(dir)/urls.txt", "--paced", "--timeout", "120"], output: referenceLog)
        close(referenceLog)
        defer { reference.stop() }
        let paced = try waitFor(file: "\(dir)/reference.log", containing: "storm ", timeout: 150)
        func field(_ name: String, in text: String? = nil) -> Double? {
            (text ?? line).split(separator: " ").first { $0.hasPrefix(name + "=") }.flatMap { Double($0.dropFirst(name.count + 1)) }
        }
        let connected = Int(field("streaming") ?? 0), refused = Int(field("refused503") ?? 0)
        let retryAfter = Int(field("retry_after") ?? 0), failed = Int(field("failed") ?? 0), other = Int(field("other") ?? 0)
        let ms = { (t: Double?) -> String in t.map { "\(($0 * 1000).fixed(0)) ms" } ?? "-" }
        let cores = ProcessInfo.processInfo.activeProcessorCount
        console.out("== bench stream --storm: \(n) streams opened in one instant on one daemon (\(cores) cores, api.streams.maxStreams=\(maxStreams))")
        console.out("connected \(connected) of \(n); refused with 503 \(refused) (\(retryAfter) with Retry-After); "
                    + "closed with no answer \(failed); other answers \(other)")
        console.out("connect to `: connected`: p50 \(ms(field("p50"))), p99 \(ms(field("p99"))) (target ≤ 1 s), max \(ms(field("max")))")
        console.out("reference (same daemon, same run): the same \(n) opened 256 at a time: \(Int(field("streaming", in: paced) ?? 0)) connected, "
                    + "connect to `: connected` p50 \(ms(field("p50", in: paced))), p99 \(ms(field("p99", in: paced))), max \(ms(field("max", in: paced)))")
        let hmax = (health.max * 1000).fixed(1), h99 = (health.p99 * 1000).fixed(1)
        console.out("/healthz throughout (every 20 ms): \(health.count) answers, p99 \(h99) ms, max \(hmax) ms (target ≤ 100 ms), failures \(health.failures)")
        console.out("daemon CPU over the storm: \(cpu.fixed(0)) ms (\((cpu * 1000 / Double(max(1, n))).fixed(0)) µs per stream); "
                    + "memory \((Double(base) / 1024).fixed(0)) MB before, \((Double(withStreams) / 1024).fixed(0)) MB with the streams")
        if work == nil { _ = try? Subprocess.run("/bin/rm", ["-rf", dir]) }
    }
}
