import FoundationEssentials
import Glibc
import HeraldCore

/// The inbox trims that accepts' numbering leaves for later (``SQLiteInboxStore/Trim``), merged
/// by (app, user) and handed to the writer together, `delay` after the first of them.
///
/// In a daemon that has run a while, every user's inbox is full, so a broadcast's append drops
/// each user's oldest entry: one `DELETE` per user, 50 ms of the writer's time for 10,000
/// users (measured on 2 cores), in the same seconds as the broadcast's writes to the streams.
/// Deferred by a second, that work runs after the streams have their events. Merging keeps one
/// bound per user however many broadcasts come meanwhile, and only the highest bound matters
/// (a trim drops every number up to it).
///
/// - Important: until the trims run, those users hold one entry more than `inbox.maxPerUser`
///   (a replay may carry it). Trims not yet handed over when the process dies are lost; the
///   user's next append trims up to its own bound, which covers them.
final class DeferredInboxTrims: Sendable {
    private struct Key: Hashable {
        var app: String
        var user: String
    }

    private struct State {
        var pending: [Key: Int64] = [:]
        /// When the pending trims are due (CLOCK_MONOTONIC seconds), or `nil` with none pending.
        var due: Double?
    }

    private let state: Locked<State>
    private let delay: TimeInterval
    private let flush: @Sendable ([SQLiteInboxStore.Trim]) -> Void
    private let worker: BlockingWorker<Void>

    /// - Parameters:
    ///   - delay: how long the first pending trim waits (the others go with it).
    ///   - flush: hands the trims to the writer (called on this type's thread, or in ``close()``).
    init(delay: TimeInterval, flush: @escaping @Sendable ([SQLiteInboxStore.Trim]) -> Void) {
        let state = Locked(State())
        self.state = state
        self.delay = delay
        self.flush = flush
        worker = BlockingWorker(name: "herald-inbox-trims", body: .init(
            run: { _ in },
            idle: { state.withLock { s in s.due.map { max(0, $0 - Self.now()) } } },
            tick: { flush(Self.take(state, dueOnly: true)) }))
    }

    /// Trims to run later (merged with those pending).
    func add(_ trims: [SQLiteInboxStore.Trim]) {
        guard !trims.isEmpty else { return }
        let wake: Bool = state.withLock { s in
            for t in trims {
                let key = Key(app: t.app, user: t.user)
                s.pending[key] = max(s.pending[key] ?? 0, t.keepAbove)
            }
            guard s.due == nil else { return false }
            s.due = Self.now() + delay
            return true
        }
        // The thread recomputes how long to sleep once it has run this (empty) job.
        if wake { worker.submit(()) }
    }

    /// Trims waiting to be handed over.
    var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Hands what is pending over now and stops the thread (before the writer closes).
    func close() {
        worker.close()
        flush(Self.take(state, dueOnly: false))
    }

    /// Empties the pending trims (only when due, unless `dueOnly` is false).
    private static func take(_ state: Locked<State>, dueOnly: Bool) -> [SQLiteInboxStore.Trim] {
        state.withLock { s in
            guard let due = s.due, !dueOnly || due <= now() else { return [] }
            let trims = s.pending.map { SQLiteInboxStore.Trim(app: $0.key.app, user: $0.key.user, keepAbove: $0.value) }
            s.pending = [:]
            s.due = nil
            return trims
        }
    }

    private static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
