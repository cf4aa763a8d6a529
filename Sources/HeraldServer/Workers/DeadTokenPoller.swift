import FoundationEssentials
import Glibc
import HeraldCore

/// Asks every running transport that learns of dead tokens out of band (a ``DeadTokenSource``,
/// such as `apns-binary`'s feedback service) on its own `deadTokenPollInterval`, and retires
/// what it reports through ``TokenInvalidator`` (Apple's timestamp rule). The transports only
/// report; this host applies.
///
/// One structured task: ``start(store:configuration:)`` once, ``stop()`` cancels and awaits it.
/// The transports are read from the worker pool at every turn, so a reload's new transports are
/// polled at once (``reschedule()`` wakes the task) and removed ones are forgotten.
final class DeadTokenPoller: Sendable {
    private let pool: WorkerPool
    private let clock: any WallClock
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let wake = WakeSignal()
    private let task = Locked<Task<Void, Never>?>(nil)

    init(pool: WorkerPool, clock: any WallClock, logger: Logger, metrics: MetricsRegistry) {
        self.pool = pool
        self.clock = clock
        self.logger = logger.labeled("dead-tokens")
        self.metrics = metrics
    }

    /// Starts polling: each source at once, then every its interval.
    func start(store: any TokenStore, configuration: @escaping @Sendable () -> HeraldConfiguration) {
        let invalidator = TokenInvalidator(store: store, logger: logger, metrics: metrics)
        let loop = Task { await run(invalidator: invalidator, configuration: configuration) }
        task.withLock { $0 = loop }
    }

    /// Re-reads the transports now (after a reload).
    func reschedule() { wake.notify() }

    /// Stops polling and waits for a poll in progress to finish: a feedback service forgets what
    /// it sent, so reports already read are applied, not dropped (a read is bounded by the
    /// transport's own timeout).
    func stop() async {
        guard let loop = task.withLock({ t in defer { t = nil }; return t }) else { return }
        loop.cancel()
        await loop.value
    }

    private func run(invalidator: TokenInvalidator, configuration: @Sendable () -> HeraldConfiguration) async {
        var due: [ObjectIdentifier: Date] = [:]
        while !Task.isCancelled {
            let sources = pool.all.values.compactMap { worker -> (String, any DeadTokenSource, TimeInterval)? in
                guard let source = worker.transport as? any DeadTokenSource, let every = source.deadTokenPollInterval else { return nil }
                return (worker.name, source, every)
            }
            let present = Set(sources.map { ObjectIdentifier($0.1) })
            due = due.filter { present.contains($0.key) }
            for (name, source, every) in sources {
                let id = ObjectIdentifier(source)
                guard due[id].map({ $0 <= clock.now }) ?? true else { continue }
                await poll(name: name, source: source, invalidator: invalidator, configuration: configuration())
                due[id] = clock.now.addingTimeInterval(every)
                if Task.isCancelled { return }
            }
            let next = due.values.min() ?? clock.now.addingTimeInterval(3600)
            await wake.wait(until: next, clock: clock)
        }
    }

    private func poll(name: String, source: any DeadTokenSource, invalidator: TokenInvalidator,
                      configuration: HeraldConfiguration) async {
        do {
            let reports = try await source.fetchDeadTokens()
            guard !reports.isEmpty else { return }
            let results = await invalidator.apply(reports, transport: name, configuration: configuration)
            let retired = results.filter { $0.result == .invalidated }.count
            logger.info("dead tokens applied", ["transport": name, "reported": String(reports.count), "retired": String(retired)])
        } catch {
            logger.warning("cannot read dead tokens; trying again at the next interval", ["transport": name, "error": String(describing: error)])
        }
    }
}
