/// Tasks started on behalf of an owner (a store wrapper, the stream hub), each handle kept until
/// the task ends, so the owner can await them when it stops: no fire-and-forget `Task`.
public final class OwnedTasks: Sendable {
    private struct State {
        var next = 0
        var running: [Int: Task<Void, Never>] = [:]
    }

    private let state = Locked(State())

    public init() {}

    /// Tasks started and not yet ended.
    public var count: Int { state.withLock { $0.running.count } }

    /// Starts `body` in a task of its own and keeps its handle until it ends.
    public func spawn(_ body: @escaping @Sendable () async -> Void) {
        state.withLock { s in
            let id = s.next
            s.next += 1
            // The task removes itself once done; it cannot get there before this insertion,
            // which holds the lock it needs.
            s.running[id] = Task { [state] in
                await body()
                _ = state.withLock { $0.running.removeValue(forKey: id) }
            }
        }
    }

    /// Waits for every task started so far (and those they start meanwhile) to end.
    /// - Parameter cancel: cancel them first.
    public func finish(cancel: Bool = false) async {
        while true {
            let tasks = state.withLock { Array($0.running.values) }
            if tasks.isEmpty { return }
            for task in tasks {
                if cancel { task.cancel() }
                await task.value
            }
        }
    }
}
