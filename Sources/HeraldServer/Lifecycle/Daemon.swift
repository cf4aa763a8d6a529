import FoundationEssentials
import Glibc
import HeraldCore
import HeraldEvents

/// `herald serve`: the HTTP API, the durable queue, a worker per transport, housekeeping, and
/// the lifecycle (SIGTERM/SIGINT stop it within a deadline, SIGHUP reloads the configuration).
///
/// ```swift
/// let daemon = Daemon(configuration: try DaemonConfiguration.load(path: "config.json", …), registry: registry,
///                     storage: storage)
/// let port = try await daemon.start()
/// let code = await daemon.runUntilSignalled()
/// ```
public final class Daemon: Sendable {
    /// What tests and embedders may replace.
    public struct Options: Sendable {
        public var clock: any WallClock
        /// Jitter source in 0..<1 for retry backoff.
        public var random: @Sendable () -> Double
        /// Builds a transport from its spec (default: the registry).
        public var makeTransport: (@Sendable (TransportSpec, TransportContext) throws -> any Transport)?
        /// Where `${VAR}` values come from on reload.
        public var environment: [String: String]
        /// While a transport is paused, how often to probe it (`nil`: `server.probeInterval`).
        public var probeInterval: TimeInterval?
        /// Take the storage driver's guard against a second daemon (SQLite: `<database>.daemon.lock`).
        public var lockDatabase: Bool
        /// Print `listening on HOST:PORT` on standard output once serving.
        public var announce: Bool
        /// Take over SIGTERM, SIGINT and SIGHUP at the start of ``Daemon/start()``, before
        /// `listening on` is announced; ``Daemon/runUntilSignalled()`` acts on the ones that arrived.
        /// - Important: process-wide; only for the process's one daemon (`herald serve`), not in tests.
        public var handleSignals: Bool
        /// The front ends to serve beside the API (the Matrix push gateway), registered in `main`.
        public var frontEnds: [any FrontEnd.Type]

        public init(clock: any WallClock = SystemClock(), random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
                    makeTransport: (@Sendable (TransportSpec, TransportContext) throws -> any Transport)? = nil,
                    environment: [String: String] = ProcessInfo.processInfo.environment,
                    probeInterval: TimeInterval? = nil, lockDatabase: Bool = true, announce: Bool = false,
                    handleSignals: Bool = false, frontEnds: [any FrontEnd.Type] = []) {
            self.frontEnds = frontEnds
            self.clock = clock
            self.random = random
            self.makeTransport = makeTransport
            self.environment = environment
            self.probeInterval = probeInterval
            self.lockDatabase = lockDatabase
            self.announce = announce
            self.handleSignals = handleSignals
        }
    }

    /// What a reload did.
    public enum ReloadOutcome: Sendable, Equatable {
        /// Applied; the transports started, restarted and stopped.
        case applied(added: [String], changed: [String], removed: [String])
        /// Refused; the old configuration stays. The reasons are logged too.
        case refused([String])
    }

    struct Running {
        var current: DaemonConfiguration
        var snapshot: RuntimeSnapshot
        var storage: OpenStorage
        /// The store as fan-out reads it (concurrent look-ups share a query).
        var lookups: CoalescingTokenStore
        var server: HTTPServer
        /// Front ends' own listeners (`matrix.listen`), by front-end name.
        var frontEndServers: [String: HTTPServer] = [:]
        /// The live streams of `GET /v1/stream` (presence and the local transport's write path).
        var streams: StreamHub
        var maintenance: Task<Void, Never>?
        /// Transports retired by reloads, stopping in the background; awaited at shutdown.
        var retiring: [Task<Void, Never>] = []
        /// The webhook senders (issue 38), when the storage keeps an event outbox.
        var webhooks: WebhookService?
        /// Records transports' pauses and resumptions as events (issue 38).
        var transportEvents: TransportEventRecorder?

        var queue: any DeliveryQueue { storage.queue }
        var store: any TokenStore { storage.tokens }
    }

    public let metrics: MetricsRegistry
    private let registry: TransportRegistry
    private let storageDrivers: StorageDrivers
    let options: Options
    private let logHandler: DaemonLogHandler
    let logger: Logger
    private let deliveryMetrics: DeliveryMetrics
    private let initial: DaemonConfiguration
    let running = Locked<Running?>(nil)
    /// Each app's local transport, for the stream hub's presence hook (which runs under the
    /// hub's lock, so it must not take `running`'s).
    private let localTransports = Locked<[String: String]>([:])
    let pool = WorkerPool()
    private let deadTokens: DeadTokenPoller
    private let reloading = Locked(false)
    private let signals = Locked<SignalStream?>(nil)
    /// The last store check's result, so a failing store is logged once, not at every probe.
    let storeHealthy = Locked(true)

    /// - Parameters:
    ///   - registry: the transport plugins.
    ///   - storage: the storage drivers; `storage.driver` picks one.
    ///   - logSink: where log records go instead of standard error (tests).
    public init(configuration: DaemonConfiguration, registry: TransportRegistry, storage: StorageDrivers,
                metrics: MetricsRegistry = MetricsRegistry(), logSink: (any LogHandler)? = nil, options: Options = Options()) {
        self.initial = configuration
        self.registry = registry
        self.storageDrivers = storage
        self.options = options
        self.metrics = metrics
        let log = configuration.configuration.log
        logHandler = DaemonLogHandler(level: log.level, format: log.format, sink: logSink)
        logger = Logger(label: "herald", level: .trace, handler: logHandler)
        deliveryMetrics = DeliveryMetrics(registry: metrics)
        deadTokens = DeadTokenPoller(pool: pool, clock: options.clock, logger: logger, metrics: metrics)
    }

    /// The configuration in force.
    public var configuration: HeraldConfiguration { running.withLock { $0?.current.configuration } ?? initial.configuration }

    /// The token store (for tests and tools).
    public var store: (any TokenStore)? { running.withLock { $0?.store } }

    /// The queue (for tests and tools).
    public var queue: (any DeliveryQueue)? { running.withLock { $0?.queue } }

    /// Event streams open now (`GET /v1/stream`).
    public var openStreams: Int { running.withLock { $0?.streams }?.count ?? 0 }

    /// The devices of `user` that count as in the foreground on this node (a stream open, and no
    /// ack timed out since).
    public func presence(app: String, user: String) -> Set<String> {
        running.withLock { $0?.streams }?.connectedDevices(app: app, users: [user])[user] ?? []
    }

    /// The port the API listens on (0 before ``start()``).
    public var port: Int { running.withLock { $0?.server.port } ?? 0 }

    // MARK: Start

    /// Opens the store and queue, starts a worker per transport and the HTTP API.
    /// - Returns: the port the API listens on.
    /// - Throws: ``DaemonError`` naming what could not start.
    @discardableResult
    public func start() async throws(DaemonError) -> Int {
        if options.handleSignals { _ = signalStream() }
        let config = initial.configuration
        if let refusal = config.api.unauthenticatedNetworkRefusal { throw DaemonError("api.keys: \(refusal)") }
        for frontEnd in options.frontEnds {
            if let refusal = frontEnd.startRefusal(config) { throw DaemonError(refusal) }
        }
        let storage: OpenStorage
        do {
            storage = try await storageDrivers.driver(for: config).open(config, metrics: metrics, exclusive: options.lockDatabase)
        } catch {
            throw DaemonError(String(describing: error))
        }
        let store = storage.tokens, queue = storage.queue
        // Another node enqueued (PostgreSQL LISTEN/NOTIFY): wake those workers now, not at their next poll.
        (queue as? any QueueWakeSource)?.onWake { [weak self] names in self?.pool.wake(names) }
        let lookups = CoalescingTokenStore(store)
        noteLocalTransports(config)
        let streams = makeStreamHub(storage)
        let snapshot = RuntimeSnapshot(configuration: config, store: lookups, presence: ClusterPresence(local: streams, directory: storage.presence))
        let api = API(API.Dependencies(
            snapshot: { [weak self] in self?.running.withLock { $0?.snapshot } ?? snapshot },
            queue: queue, store: store, clock: options.clock,
            readiness: { [weak self] in
                let storeOpen = await self?.storeAnswers(queue) ?? false
                return Readiness(storeOpen: storeOpen, transports: self?.pool.statuses ?? [:], webhooks: self?.webhookReadiness() ?? [:])
            },
            wake: { [weak self] names in self?.pool.wake(names) }, streams: streams, channels: storage.channels,
            transport: { [weak self] name in self?.pool.transport(name) }, events: storage.events), metrics: metrics, logger: logger,
            frontEnds: options.frontEnds)
        var serverOptions = HTTPServer.Options(config.server, maxBodyBytes: config.api.maxBodyBytes,
                                               maxStreams: config.api.streams.maxStreams)
        serverOptions.answeredByServer = { api.recordServerAnswer(method: $0, path: $1, status: $2) }
        serverOptions.streamBufferBytes = config.api.streams.bufferBytes
        serverOptions.isStreamRequest = { method, path in method == "GET" && (path == "/v1/stream" || path.hasPrefix("/v1/stream?")) }
        // Answered by the acceptor when whole in a connection's first bytes: never behind a storm.
        serverOptions.isProbeRequest = { method, path in method == "GET" && (path == "/healthz" || path == "/readyz") }
        let server = HTTPServer(options: serverOptions, logger: logger, metrics: metrics,
                                immediate: { api.immediate($0) }, handler: { await api.handle($0) })
        running.withLock {
            $0 = Running(current: initial, snapshot: snapshot, storage: storage, lookups: lookups, server: server, streams: streams)
            if let outbox = storage.events { $0?.transportEvents = TransportEventRecorder(outbox: outbox, clock: options.clock, logger: logger) }
        }
        for name in config.transports.keys.sorted() {
            pool.add(makeWorker(name: name, spec: config.transports[name]!, queue: queue, store: store, started: false))
        }
        let port: Int
        do {
            port = try server.start(config.api.listen)
            try startFrontEndListeners(config, api: api)
        } catch {
            // The listeners that did start stop again (a later one could not listen).
            for started in running.withLock({ $0.map { Array($0.frontEndServers.values) } ?? [] }) + [server] {
                await started.stop(deadline: 0)
            }
            _ = await stopWorkers(deadline: 1)
            await storage.close()
            running.withLock { $0 = nil }
            throw DaemonError(error.message)
        }
        let maintenance = Task { [weak self] in
            guard let self else { return }
            await self.maintain()
        }
        running.withLock { $0?.maintenance = maintenance }
        if let outbox = storage.events {
            // Its own tasks: deliveries never wait for webhooks.
            let webhooks = WebhookService(outbox: outbox, node: "\(ProcessInfo.processInfo.hostName)-\(getpid())-\(UUIDSource.random().lowercasedString.prefix(8))",
                                          clock: options.clock, logger: logger, metrics: metrics)
            running.withLock { $0?.webhooks = webhooks }
            await webhooks.update(config.webhooks)
        }
        deadTokens.start(store: store) { [weak self] in self?.configuration ?? config }
        let address = ListenAddress(host: config.api.listen.host, port: port)
        logger.notice("listening", ["address": address.description, "transports": config.transports.keys.sorted().joined(separator: ","),
                                    "auth": config.api.keys.isEmpty ? "none (loopback only)" : "\(config.api.keys.count) key(s)"])
        if options.announce {
            FileDescriptorOutput.standardOutput("herald: listening on \(address)\n")
        }
        return port
    }

    private func transportContext(_ name: String) -> TransportContext {
        TransportContext(logger: logger.labeled("transport.\(name)"), clock: options.clock, metrics: metrics,
                         durableWrites: configuration.storage.durableWrites,
                         streams: running.withLock { $0?.streams })
    }

    /// Each webhook's state for `/readyz`: degraded while its oldest waiting event is older than `events.degradedAfter`.
    private func webhookReadiness() -> [String: String] {
        guard let ages = running.withLock({ $0?.webhooks })?.oldestPendingAges else { return [:] }
        let limit = configuration.events.degradedAfter
        return ages.mapValues { age in
            age > limit ? "degraded: oldest event waiting \(Int(age)) s (events.degradedAfter \(Int(limit)) s)" : "ok"
        }
    }

    private func noteLocalTransports(_ c: HeraldConfiguration) {
        var map: [String: String] = [:]
        for (id, app) in c.apps { if let local = c.localTransport(app: app) { map[id] = local } }
        localTransports.withLock { $0 = map }
    }

    /// The stream hub over the storage's inbox; a device that connects is recorded in the
    /// storage's presence directory (other nodes leave its local deliveries to this one), has its
    /// parked deliveries made due and its app's local worker woken.
    private func makeStreamHub(_ storage: OpenStorage) -> StreamHub {
        let queue = storage.queue, presence = storage.presence
        return StreamHub(inbox: storage.inbox, clock: options.clock, logger: logger, metrics: metrics,
                         maxPerUser: { [weak self] app in self?.configuration.app(app)?.inbox.maxPerUser ?? 100 },
                         unpark: { [weak self] app, device in
                             guard let self, let c = Optional(self.configuration), let a = c.app(app),
                                   let local = c.localTransport(app: a) else { return }
                             do {
                                 try await presence.published()
                             } catch {
                                 self.logger.warning("cannot tell the other nodes about a stream yet; until the database takes it, they may route its notifications to the push fallback",
                                                     ["device": Redact.token(device), "error": String(describing: error)])
                             }
                             do {
                                 if try await queue.unpark(transport: local, token: device, now: self.options.clock.now) > 0 {
                                     self.pool.wake([local])
                                 }
                             } catch {
                                 self.logger.warning("cannot release the parked deliveries of a device that connected; they go at their due time",
                                                     ["device": Redact.token(device), "error": String(describing: error)])
                             }
                         },
                         opened: { [localTransports] app, user, device in
                             guard let local = localTransports.withLock({ $0[app] }) else { return }
                             presence.connected(app: app, user: user, device: device, transport: local)
                         },
                         closed: { app, device in presence.disconnected(app: app, device: device) })
    }

    private func buildTransport(_ spec: TransportSpec) -> any Transport {
        let context = transportContext(spec.name)
        do {
            if let make = options.makeTransport { return try make(spec, context) }
            return try registry.makeTransport(spec, context: context)
        } catch {
            return UnavailableTransport(name: spec.name, reason: String(describing: error))
        }
    }

    private func makeWorker(name: String, spec: TransportSpec, queue: any DeliveryQueue, store: any TokenStore,
                            started: Bool, transport: (any Transport)? = nil) -> TransportWorker {
        let transport = transport ?? buildTransport(spec)
        let preferred = transport.preferredBatchSize
        let fallback = initial.configuration
        let probe = options.probeInterval
        return TransportWorker(
            name: name, transport: transport, configuration: spec.configuration, queue: queue,
            invalidator: TokenInvalidator(store: store, logger: logger, metrics: metrics),
            clock: options.clock, logger: logger, metrics: deliveryMetrics, alreadyStarted: started, random: options.random,
            onStatus: { [weak self] status in self?.running.withLock({ $0?.transportEvents })?.statusChanged(transport: name, status) },
            onReroute: { [weak self] names in self?.pool.wake(names) }
        ) { [weak self] in
            let c = self?.configuration ?? fallback
            var settings = TransportWorker.Settings(retry: c.delivery.retry, batchSize: min(c.delivery.batchSize, preferred),
                                                    concurrency: c.server.concurrency(for: name), deadline: c.server.deadline(for: name),
                                                    lease: c.server.lease, linger: c.server.batchLinger,
                                                    probeInterval: probe ?? c.server.probeInterval)
            settings.local = c.localDeliveryRules
            return settings
        }
    }

    // MARK: Reload

    /// Reloads the configuration file the daemon started with.
    @discardableResult
    public func reloadFromFile() async -> ReloadOutcome {
        guard let path = initial.configuration.sourcePath else {
            return refuse(["the configuration did not come from a file"])
        }
        let next: DaemonConfiguration
        do {
            next = try DaemonConfiguration.load(path: path, registry: registry, environment: options.environment)
        } catch {
            return refuse(error.errors.map { "\(path): \($0)" })
        }
        return await reload(next)
    }

    private func refuse(_ reasons: [String]) -> ReloadOutcome {
        logger.error("configuration not reloaded; keeping the running one", ["reasons": reasons.joined(separator: "; ")])
        return .refused(reasons)
    }

    /// Applies a new configuration: keys, apps, routes, tuning and log settings at once;
    /// transports whose section changed are started anew (the others keep their connections).
    /// Refused, keeping the old configuration, when a setting that needs a restart changed or
    /// a new transport cannot start.
    public func reload(_ next: DaemonConfiguration) async -> ReloadOutcome {
        guard reloading.withLock({ r in defer { r = true }; return !r }) else { return refuse(["a reload is already running"]) }
        defer { reloading.withLock { $0 = false } }
        guard let (current, queue, store, lookups) = running.withLock({ r in r.map { ($0.current, $0.queue, $0.store, $0.lookups) } }) else {
            return refuse(["the daemon is not running"])
        }
        let old = current.configuration, new = next.configuration
        var reasons: [String] = []
        if old.storage != new.storage { reasons.append("storage changed: restart to apply") }
        if old.api.listen != new.api.listen { reasons.append("api.listen changed (\(old.api.listen) → \(new.api.listen)): restart to apply") }
        if old.api.maxBodyBytes != new.api.maxBodyBytes { reasons.append("api.maxBodyBytes changed: restart to apply") }
        reasons += Self.streamRestartReasons(old: old.api.streams, new: new.api.streams)
        for frontEnd in options.frontEnds {
            reasons += frontEnd.restartReasons(old: old, new: new)
            if let refusal = frontEnd.startRefusal(new) { reasons.append(refusal) }
        }
        if let refusal = new.api.unauthenticatedNetworkRefusal { reasons.append("api.keys: \(refusal)") }
        if old.server.connectionLimit != new.server.connectionLimit || old.server.connectionTimeout != new.server.connectionTimeout
            || old.server.maxCommitBatch != new.server.maxCommitBatch {
            reasons.append("server.connectionLimit, connectionTimeout or maxCommitBatch changed: restart to apply")
        }
        if old.server.headerTimeout != new.server.headerTimeout || old.server.bodyTimeout != new.server.bodyTimeout
            || old.server.connectionsPerAddress != new.server.connectionsPerAddress {
            reasons.append("server.headerTimeout, bodyTimeout or connectionsPerAddress changed: restart to apply")
        }
        if !reasons.isEmpty { return refuse(reasons) }

        let oldNames = Set(current.transportSections.keys).union(old.transports.keys)
        let newNames = Set(new.transports.keys)
        let removed = oldNames.subtracting(newNames).sorted()
        let added = newNames.subtracting(oldNames).sorted()
        // A transport changed when its section, its type or a file it names (a rotated key or
        // certificate) changed.
        let changed = newNames.intersection(oldNames).filter { current.transportChanged($0, in: next) }.sorted()

        // Start the new transports first: a reload must never replace a working one with a broken one.
        var fresh: [String: any Transport] = [:]
        for name in added + changed {
            let transport = buildTransport(new.transports[name]!)
            do {
                try await transport.start()
                fresh[name] = transport
            } catch {
                for t in fresh.values { await t.shutdown() }
                await transport.shutdown()
                return refuse(["transport \(name) cannot start: \(error)"])
            }
        }

        let presence: (any Presence)? = running.withLock { r in r.map { ClusterPresence(local: $0.streams, directory: $0.storage.presence) } }
        let snapshot = RuntimeSnapshot(configuration: new, store: lookups, presence: presence)
        running.withLock { r in
            r?.current = next
            r?.snapshot = snapshot
        }
        noteLocalTransports(new)
        logHandler.update(level: new.log.level, format: new.log.format)
        await running.withLock({ $0?.webhooks })?.update(new.webhooks)
        var retired: [TransportWorker] = []
        for name in removed + changed {
            if let w = pool.remove(name) { retired.append(w) }
        }
        for name in added + changed {
            pool.add(makeWorker(name: name, spec: new.transports[name]!, queue: queue, store: store, started: true, transport: fresh[name]))
        }
        deadTokens.reschedule()
        // A paused transport that stays as it is tries again now: the fix may be outside the
        // config file (a key restored on the provider's side, a network path opened).
        for (name, worker) in pool.all where !changed.contains(name) && worker.status.isPaused { worker.resume() }
        let deadline = new.server.shutdownDeadline
        let retire = Task { [logger] in
            for w in retired {
                await w.stop(deadline: deadline)
                await w.transport.shutdown()
                await w.finished(within: max(1, deadline))
                logger.info("transport retired after reload", ["transport": w.name])
            }
        }
        running.withLock { $0?.retiring.append(retire) }
        let depth = queue.depth()
        for name in removed where (depth[name]?.backlog ?? 0) > 0 {
            logger.warning("deliveries wait for a transport that is no longer configured; they are sent if it comes back",
                           ["transport": name, "count": String(depth[name]!.backlog)])
        }
        logger.notice("configuration reloaded", ["added": added.joined(separator: ","), "changed": changed.joined(separator: ","),
                                                 "removed": removed.joined(separator: ","), "keys": String(new.api.keys.count),
                                                 "apps": String(new.apps.count)])
        return .applied(added: added, changed: changed, removed: removed)
    }

    // MARK: Stop

    private func stopWorkers(deadline: TimeInterval) async -> Bool {
        let workers = pool.all
        let results = await withTaskGroup(of: Bool.self) { group in
            for w in workers.values { group.addTask { await w.stop(deadline: deadline) } }
            var all = true
            for await ok in group { all = all && ok }
            return all
        }
        for w in workers.values {
            _ = pool.remove(w.name)
            // Makes a batch still out answer (its engines stop), then waits for its outcome to be
            // recorded, so nothing writes to the queue after it closes.
            await w.transport.shutdown()
            if !(await w.finished(within: max(1, deadline))) {
                logger.error("a transport kept a batch after shutting down; its deliveries are settled at the next start",
                             ["transport": w.name])
            }
        }
        return results
    }

    /// Stops accepting, lets in-flight requests and batches finish within
    /// `server.shutdownDeadline`, closes the transports and the queue.
    /// - Returns: whether everything finished in time (unfinished batches are settled at the next start).
    @discardableResult
    public func shutdown() async -> Bool {
        guard let r = running.withLock({ r in defer { r = nil }; return r }) else { return true }
        let deadline = r.current.configuration.server.shutdownDeadline
        let start = Date()
        logger.notice("shutting down", ["deadline_s": String(deadline)])
        await withTaskGroup(of: Void.self) { group in
            for server in r.frontEndServers.values { group.addTask { await server.stop(deadline: deadline) } }
            await r.server.stop(deadline: deadline)
        }
        // What the HTTP layer started and could not await: stream catch-ups, look-ups.
        await r.streams.finishCatchUps()
        await r.lookups.finish()
        r.maintenance?.cancel()
        await deadTokens.stop()
        let remaining = max(0.1, deadline - Date().timeIntervalSince(start))
        let clean = await stopWorkers(deadline: remaining)
        for retiring in r.retiring { await retiring.value }
        await r.webhooks?.stop()
        await r.transportEvents?.stop()
        await r.storage.close()
        logger.notice("stopped", ["clean": String(clean), "seconds": Date().timeIntervalSince(start).fixed(2)])
        return clean
    }

    /// The process's signal stream, created (and the handlers installed) on first use.
    private func signalStream() -> SignalStream {
        signals.withLock { s in
            if let s { return s }
            let stream = SignalStream([SIGTERM, SIGINT, SIGHUP])
            s = stream
            return stream
        }
    }

    /// Serves until SIGTERM or SIGINT (then shuts down); SIGHUP reloads the configuration file.
    /// Signals that arrived since ``start()`` (with ``Options/handleSignals``) are acted on first.
    /// - Returns: the exit code (0).
    public func runUntilSignalled() async -> Int32 {
        for await signal in signalStream().stream {
            if signal == SIGHUP {
                logger.notice("SIGHUP: reloading the configuration")
                await reloadFromFile()
                continue
            }
            logger.notice("\(signal == SIGTERM ? "SIGTERM" : "SIGINT"): stopping")
            break
        }
        await shutdown()
        return 0
    }
}

/// A transport that could not even be built; its worker retries and reports the reason.
final class UnavailableTransport: Transport {
    let name: String
    let reason: String
    init(name: String, reason: String) {
        self.name = name
        self.reason = reason
    }
    func start() async throws { throw TransportError(transport: name, message: reason) }
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] { batch.map { _ in .setupFailure(reason: reason) } }
}
