import FoundationEssentials
import Glibc
import HeraldCore

/// The workers by transport name; replaced piecewise on reload.
final class WorkerPool: Sendable {
    private let workers = Locked<[String: TransportWorker]>([:])

    var all: [String: TransportWorker] { workers.withLock { $0 } }

    func add(_ worker: TransportWorker) {
        workers.withLock { $0[worker.name] = worker }
        worker.start()
    }

    /// Removes a worker (the caller stops it).
    func remove(_ name: String) -> TransportWorker? {
        workers.withLock { $0.removeValue(forKey: name) }
    }

    func wake(_ names: Set<String>) {
        let targets = workers.withLock { w in names.compactMap { w[$0] } }
        for t in targets { t.wake() }
    }

    /// The transport of the worker named so.
    func transport(_ name: String) -> (any Transport)? { workers.withLock { $0[name]?.transport } }

    func wakeAll() {
        for w in all.values { w.wake() }
    }

    /// Transport name → status text, for `/readyz`: a started transport that reports an
    /// impairment (``Transport/impairment``) is `degraded: <why>`.
    var statuses: [String: String] {
        all.mapValues { w in
            if w.status == .started, let why = w.transport.impairment { return "degraded: \(why)" }
            return w.status.text
        }
    }
}
