import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// A Web Push push service for tests and pipelines: one or more origins (each its own TLS +
/// HTTP/2 listener on loopback), subscriptions made as browsers make them, every request
/// checked and decrypted by ``WebPushServiceRules``.
///
/// ```swift
/// let sim = try WebPushSimulator(configuration: .init(tls: .init(certificateFile: cert, keyFile: key), seed: "s"))
/// try sim.start()
/// let subscription = sim.subscriptionJSON(0)   // {"endpoint":"https://127.0.0.1:PORT/push/0-…","keys":{…}}
/// … sim.rules.received …
/// sim.stop()
/// ```
public final class WebPushSimulator: Sendable {
    /// Where to listen, the subscriptions' seed, and the faults.
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// One listener per entry (0 picks a free port): each is its own push service origin.
        public var ports: [Int] = [0]
        public var tls: SimulatorHTTP2Server.Configuration.TLS
        /// What every subscription's keys derive from (see ``SimulatedSubscriptions``).
        public var seed: String
        public var faults = WebPushServiceRules.Faults()
        /// Seconds every answer is held back (other streams are answered meanwhile).
        public var latency: Double = 0
        /// JSON Lines file of every accepted message, decrypted.
        public var recordPath: String?
        public var logger: Logger = .disabled

        public init(tls: SimulatorHTTP2Server.Configuration.TLS, seed: String) {
            self.tls = tls
            self.seed = seed
        }
    }

    public let configuration: Configuration
    /// The checks, faults and what was received.
    public let rules: WebPushServiceRules
    private let servers: [SimulatorHTTP2Server]

    /// Loads TLS and opens the record file; does not listen yet.
    public init(configuration: Configuration, clock: any WallClock = SystemClock()) throws(WebPushSimulatorError) {
        guard !configuration.ports.isEmpty else { throw WebPushSimulatorError("give at least one port (one per origin)") }
        self.configuration = configuration
        let rules = try WebPushServiceRules(subscriptions: SimulatedSubscriptions(seed: configuration.seed), faults: configuration.faults,
                                            clock: clock, recordPath: configuration.recordPath)
        self.rules = rules
        var servers: [SimulatorHTTP2Server] = []
        let latency = configuration.latency
        for port in configuration.ports {
            let server: SimulatorHTTP2Server
            do {
                server = try SimulatorHTTP2Server(
                    configuration: .init(host: configuration.host, port: port, tls: configuration.tls, maxRequestBodyBytes: 64 * 1024,
                                         threadName: "webpush-sim", logger: configuration.logger)) { request in
                    // A push service knows its own origin; the listener's is the authority the client connected to.
                    let origin = "https://" + request.authority
                    let answer = rules.answer(.init(method: request.method, path: request.path,
                                                    headers: request.headers.map { (name: $0.name, value: $0.value) },
                                                    body: request.body, origin: origin))
                    return SimulatorHTTP2Response(status: answer.status, headers: answer.headers.sorted { $0.key < $1.key }.map { SimulatorHTTP2Header($0.key, $0.value) },
                                                  body: answer.body, delay: latency)
                }
            } catch {
                throw WebPushSimulatorError(error.description)
            }
            servers.append(server)
        }
        self.servers = servers
    }

    /// Starts every listener.
    public func start() throws(WebPushSimulatorError) {
        for server in servers {
            do { try server.start() } catch { throw WebPushSimulatorError(error.description) }
        }
    }

    /// The origins, `https://host:port`, in ``Configuration/ports`` order.
    public var origins: [String] {
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        return servers.map { "https://\(host):\($0.port)" }
    }

    /// Per origin (in ``origins`` order): connections accepted since start, and open now.
    public var connections: [(accepted: Int, open: Int)] {
        servers.map { ($0.counters.connections, $0.openConnections) }
    }

    /// Subscription `index` as a page registers it, at origin `index % origins.count`.
    public func subscriptionJSON(_ index: Int) -> String {
        let all = origins
        return rules.subscriptions.subscription(index).json(origin: all[index % all.count])
    }

    /// Writes subscriptions 0..<count, one JSON object per line, to `path`.
    public func writeSubscriptions(count: Int, to path: String) throws(WebPushSimulatorError) {
        var text = ""
        for i in 0..<count { text += subscriptionJSON(i) + "\n" }
        do { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) } catch {
            throw WebPushSimulatorError("cannot write the subscriptions to \"\(path)\": \(SystemError.describe(error))")
        }
    }

    /// `N requests, N accepted, refused: …`.
    public var summary: String { rules.summary }

    /// Stops every listener and closes the record file.
    public func stop() {
        for server in servers { server.stop() }
        rules.close()
    }
}
