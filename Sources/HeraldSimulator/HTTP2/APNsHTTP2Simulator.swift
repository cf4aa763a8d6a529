import Dispatch
import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// An APNs HTTP/2 provider API on loopback that answers as Apple documents.
///
/// A real server: TLS with ALPN `h2` (or cleartext h2c for debugging), libnghttp2, one thread per
/// connection. It validates every request by Apple's rules, checks provider tokens or client
/// certificates, can be told to misbehave (``HTTP2Faults``), and records what it accepted.
///
/// ```swift
/// var config = APNsHTTP2Simulator.Configuration(
///     tls: .init(certificateFile: "server.pem", keyFile: "server.key"),
///     authentication: .token(keys: [.init(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", publicKeyFile: "key.pub.pem")]))
/// let sim = try APNsHTTP2Simulator(configuration: config)
/// try sim.start()            // listens on 127.0.0.1:sim.port
/// …
/// sim.received               // what arrived
/// sim.stop()
/// ```
public final class APNsHTTP2Simulator: Sendable {
    /// The configuration it was made with.
    public let configuration: Configuration
    private let core: HTTP2ServerCore
    /// The channel management port (``Configuration/managementPort``), when configured.
    private let management: SimulatorHTTP2Server?
    private let state = Locked<RunState>(RunState())

    private struct RunState {
        var listener: SocketListener?
        var acceptDone: DispatchSemaphore?
        var stopped = false
    }

    /// Loads keys and TLS material and opens the record file; does not listen yet.
    /// - Throws: ``HTTP2SimulatorError`` naming the file or setting at fault.
    public convenience init(configuration: Configuration) throws(HTTP2SimulatorError) {
        var verifier: (any HTTP2ProviderTokenVerifying)? = nil
        if case .token(let keys) = configuration.authentication {
            verifier = try HTTP2ES256TokenVerifier(keys: keys)
        }
        try self.init(configuration: configuration, verifier: verifier)
    }

    init(configuration: Configuration, verifier: (any HTTP2ProviderTokenVerifying)?) throws(HTTP2SimulatorError) {
        self.configuration = configuration
        guard configuration.maxConcurrentStreams >= 1 else {
            throw HTTP2SimulatorError("maxConcurrentStreams must be at least 1, found \(configuration.maxConcurrentStreams)")
        }
        var authenticator: HTTP2TokenAuthenticator? = nil
        switch configuration.authentication {
        case .token(let keys):
            guard !keys.isEmpty else {
                throw HTTP2SimulatorError("token authentication needs at least one key (key id, team, public key file)")
            }
            guard let verifier else { throw HTTP2SimulatorError("token authentication needs a token verifier") }
            authenticator = HTTP2TokenAuthenticator(verifier: verifier, clock: configuration.clock,
                                                    maxTokenAge: configuration.tokenMaxAge,
                                                    updateInterval: configuration.tokenUpdateInterval)
        case .certificate:
            if let tls = configuration.tls, tls.clientCAFile == nil {
                throw HTTP2SimulatorError("certificate authentication needs a client CA file (TLS.clientCAFile / --client-ca)")
            }
        }
        let makeStream = try HTTP2StreamFactory.make(configuration.tls, logger: configuration.logger)
        let recorder = try HTTP2Recorder(recordFile: configuration.recordFile, retains: configuration.retainsNotifications)
        guard configuration.channelLimit >= 0 else {
            throw HTTP2SimulatorError("channelLimit must be 0 or more, found \(configuration.channelLimit)")
        }
        let channels = APNsChannelStore(limit: configuration.channelLimit, retainsBroadcasts: configuration.retainsNotifications)
        management = try Self.makeManagement(configuration, channels: channels, authenticator: authenticator)
        core = try HTTP2ServerCore(
            authenticator: authenticator, topics: configuration.topics, recorder: recorder,
            faults: HTTP2FaultBoard(configuration.faults), sandbox: configuration.environment == .sandbox,
            maxConcurrentStreams: configuration.maxConcurrentStreams,
            singleStreamUntilAuthenticated: configuration.singleStreamUntilAuthenticated,
            clock: configuration.clock, logger: configuration.logger, usesTLS: configuration.tls != nil,
            channels: channels, makeStream: makeStream)
    }

    private static func makeManagement(_ configuration: Configuration, channels: APNsChannelStore,
                                       authenticator: HTTP2TokenAuthenticator?) throws(HTTP2SimulatorError) -> SimulatorHTTP2Server? {
        guard let port = configuration.managementPort else { return nil }
        var authenticate: (@Sendable (String?) -> APNsHTTP2Reason?)? = nil
        if let authenticator {
            // Each request stands alone here: the token must be valid and younger than the limit.
            authenticate = { header in
                var state = HTTP2TokenAuthState()
                guard let header else { return .missingProviderToken }
                return Array(header.utf8).withUnsafeBytes { authenticator.authenticate($0, state: &state) }
            }
        }
        let rules = ChannelManagementRules(store: channels, bundles: configuration.topics, authenticate: authenticate)
        let tls = configuration.tls.map {
            SimulatorHTTP2Server.Configuration.TLS(certificateFile: $0.certificateFile, keyFile: $0.keyFile, clientCAFile: $0.clientCAFile)
        }
        do {
            return try SimulatorHTTP2Server(
                configuration: .init(host: configuration.host, port: port, tls: tls, threadName: "apns-manage",
                                     logger: configuration.logger)) { request in rules.respond(request) }
        } catch {
            throw HTTP2SimulatorError("management port: \(error.description)")
        }
    }

    deinit { stop() }

    /// Binds the port and starts accepting connections.
    /// - Throws: ``HTTP2SimulatorError`` when the address cannot be bound, or when called twice.
    public func start() throws(HTTP2SimulatorError) {
        let listener: SocketListener
        do {
            listener = try SocketListener(host: configuration.host, port: configuration.port, backlog: 512, accepted: .nonBlocking)
        } catch {
            throw HTTP2SimulatorError(error)
        }
        let done = DispatchSemaphore(value: 0)
        try state.withLock { (s: inout RunState) throws(HTTP2SimulatorError) in
            guard s.listener == nil, !s.stopped else {
                listener.release()
                throw HTTP2SimulatorError("the simulator was already started; make a new one")
            }
            s.listener = listener
            s.acceptDone = done
        }
        let core = self.core
        OSThread.start(name: "apns-h2-accept") {
            while let fd = listener.accept() {
                core.recorder.connectionOpened()
                guard let stream = core.makeStream(fd) else { close(fd); continue }
                let connection = HTTP2Connection(id: core.newConnectionID(), fd: fd, stream: stream, core: core)
                core.connectionStarted()
                OSThread.start(name: "apns-h2-conn") { connection.run() }
            }
            listener.release()
            done.signal()
        }
        if let management {
            do { try management.start() } catch {
                stop()
                throw HTTP2SimulatorError("management port: \(error.description)")
            }
            configuration.logger.info("APNs channel management listening", ["address": "\(listener.host):\(management.port)"])
        }
        configuration.logger.info("APNs HTTP/2 simulator listening", ["address": "\(listener.host):\(listener.port)"])
    }

    /// The channel management port (0 before ``start()`` or when not configured).
    public var managementPort: Int { management?.port ?? 0 }

    /// The broadcast channels and the broadcasts accepted on them.
    public var channels: APNsChannelStore { core.channels }

    /// Waits (up to `timeout` seconds) until at least `count` broadcasts were accepted.
    /// - Returns: the accepted broadcasts, or `nil` on timeout.
    public func waitForBroadcasts(count: Int, timeout: TimeInterval = 30) async -> [ReceivedBroadcast]? {
        await SimulatorWait.value(timeout: timeout, every: 2_000_000) {
            let r = core.channels.broadcasts
            return r.count >= count ? r : nil
        }
    }

    /// The bound port (0 before ``start()``).
    public var port: Int { state.withLock { $0.listener?.port ?? 0 } }

    /// Every accepted notification so far, in arrival order (when ``Configuration/retainsNotifications``).
    public var received: [ReceivedNotification] { core.recorder.received }

    /// Forgets the accepted notifications kept in memory.
    public func clearReceived() { core.recorder.clearReceived() }

    /// Counters of connections, requests and answers.
    public var counters: HTTP2SimulatorCounters { core.recorder.counters }

    /// The faults in force (with the 500/503 counts still to come).
    public var faults: HTTP2Faults { core.faults.faults }

    /// Replaces the faults; takes effect on the next request of every connection.
    public func setFaults(_ faults: HTTP2Faults) { core.faults.set(faults) }

    /// Waits (up to `timeout` seconds) until at least `count` notifications were accepted.
    /// - Returns: the accepted notifications, or `nil` on timeout.
    public func waitForNotifications(count: Int, timeout: TimeInterval = 30) async -> [ReceivedNotification]? {
        await SimulatorWait.value(timeout: timeout, every: 2_000_000) {
            let r = received
            return r.count >= count ? r : nil
        }
    }

    /// Stops accepting, closes every connection, and waits (up to 5 s) for them to end.
    public func stop() {
        let (listener, done) = state.withLock { s -> (SocketListener?, DispatchSemaphore?) in
            if s.stopped { return (nil, nil) }
            s.stopped = true
            return (s.listener, s.acceptDone)
        }
        management?.stop()
        guard let listener else { return }
        listener.close()
        core.signalStop()
        _ = done?.wait(timeout: .now() + 5)
        let end = Date().addingTimeInterval(5)
        while core.activeConnections > 0 && Date() < end { usleep(2_000) }
        core.recorder.flush()
    }

    /// One line for logs and the CLI's exit summary (broadcasts, when there were any, at the end).
    public var summary: String {
        let broadcasts = core.channels.broadcastCount
        return "apns-http2 simulator: " + counters.summary + (broadcasts > 0 ? ", broadcasts \(broadcasts)" : "")
    }
}
