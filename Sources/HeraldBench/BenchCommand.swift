import FoundationEssentials
import HeraldAPNs
import HeraldCLI
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// `herald-bench apns-http2`: the transport's throughput next to h2load against the same server.
enum BenchCommand {
    static let spec = CommandSpec(
        path: "apns-http2",
        summary: "Benchmark the apns-http2 transport against a local HTTP/2 server, next to h2load.",
        usage: "apns-http2 [--n N] [--connections C] [--streams S] [--engine curl|nghttp2|both] [--server nghttpd|simulator|auto] [--work DIR]",
        options: [
            .value("n", "N", "notifications per run (default 100000)"),
            .value("connections", "C", "connections for the second round (default: one per core; the first round uses 1)"),
            .value("streams", "S", "streams in flight per connection, for h2load -m and the transport (default 100)"),
            .value("engine", "E", "curl, nghttp2, or both (default both; one alone is for profiling)"),
            .value("server", "KIND", "nghttpd, simulator, or auto: the simulator when h2load gets at least as much from it as from nghttpd (default auto)"),
            .value("work", "DIR", "folder for certificates and server files (default var/bench)"),
            .flag("json", "print the figures as one JSON object"),
        ],
        discussion: """
        Starts the server on 127.0.0.1, runs h2load (1 connection, S streams; then C connections) with
        the same request Herald sends (POST /3/device/<token>, APNs headers, a JWT, a small payload),
        then sends N notifications through the transport with each engine (curl, nghttp2). Prints
        notifications/s for each, the ratio to h2load, and CPU time per notification. The targets
        for the nghttp2 engine on one connection (at least 0.6× h2load, at most 15 µs of CPU per
        notification) are printed as met or not met.
        Needs h2load and nghttpd (Debian nghttp2-client, nghttp2-server).
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let n = try arguments.int("n", command: spec.path, in: 100...10_000_000) ?? 100_000
        let connections = try arguments.int("connections", command: spec.path, in: 1...64)
        let streams = try arguments.int("streams", command: spec.path, in: 1...10_000) ?? 100
        let work = arguments.value("work") ?? "var/bench"
        let serverChoice = arguments.value("server") ?? "auto"
        let engine = arguments.value("engine") ?? "both"
        guard ["both", "curl", "nghttp2"].contains(engine) else {
            throw .usage("--engine: expected curl, nghttp2 or both", command: spec.path)
        }
        guard ["auto", "nghttpd", "simulator"].contains(serverChoice) else {
            throw .usage("--server: expected nghttpd, simulator or auto", command: spec.path)
        }
        do {
            let bench = try APNsBenchmark(n: n, streams: streams, work: work, registry: context.registry, console: context.console,
                                          engines: engine == "both" ? APNsBenchmark.allEngines : [engine])
            try await bench.run(serverChoice: serverChoice, connections: connections, json: arguments.flag("json"))
        } catch let error as CLIError {
            throw error
        } catch {
            throw .runtime("benchmark failed: \(error)")
        }
    }
}

/// CPU time of this process (user + system), in seconds.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
}
