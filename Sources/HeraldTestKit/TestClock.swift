import Foundation
import HeraldAPNs
import HeraldCore

/// A clock that moves only when a test says so.
///
/// `sleep(until:)` suspends until ``advance(by:)`` moves the time past the deadline, so backoff,
/// expiry and token refresh are tested without sleeping. ``waitForSleepers(_:)`` lets a test wait
/// until the code under test has reached its sleep.
public final class TestClock: WallClock, Sendable {
    private struct Sleeper {
        var id: UInt64
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Date
        var nextID: UInt64 = 0
        var sleepers: [Sleeper] = []
    }

    private let state: Locked<State>

    /// Starts at `start` (default: a fixed date, 2026-01-01T00:00:00Z).
    public init(start: Date = Date(timeIntervalSince1970: 1_767_225_600)) {
        state = Locked(State(now: start))
    }

    public var now: Date { state.withLock { $0.now } }

    public func sleep(until deadline: Date) async throws {
        let id: UInt64 = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Cancelled before it got here (the cancellation handler found no sleeper to
                // wake): never sleep, or a cancelled waiter (a `WakeSignal.wait(until:)` whose
                // signal came first) would wait for a time the test may never reach.
                let outcome: Bool? = state.withLock { s in
                    if Task.isCancelled { return nil }
                    if deadline <= s.now { return true }
                    s.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return false
                }
                switch outcome {
                case nil: continuation.resume(throwing: CancellationError())
                case true?: continuation.resume()
                case false?: break
                }
            }
        } onCancel: {
            let sleeper: Sleeper? = state.withLock { s in
                guard let i = s.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.sleepers.remove(at: i)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    public func advance(by seconds: TimeInterval) {
        let due: [Sleeper] = state.withLock { s in
            s.now = s.now.addingTimeInterval(seconds)
            let now = s.now
            let due = s.sleepers.filter { $0.deadline <= now }
            s.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Moves time to `date` (never backwards).
    public func advance(to date: Date) {
        advance(by: max(0, date.timeIntervalSince(now)))
    }

    /// How many tasks are sleeping on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The earliest deadline a task sleeps until.
    public var nextDeadline: Date? { state.withLock { $0.sleepers.map(\.deadline).min() } }

    /// Waits (in real time, up to `timeout`) until at least `count` tasks sleep on this clock.
    ///
    /// The default timeout is long on purpose: on a 2-core machine, tests that run child
    /// processes can hold both cooperative threads for seconds, and a short timeout would then
    /// fail a test that is only waiting its turn.
    /// - Returns: whether they did.
    @discardableResult
    public func waitForSleepers(_ count: Int = 1, timeout: TimeInterval = 60) async -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if sleeperCount >= count { return true }
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        return sleeperCount >= count
    }
}
