import FoundationEssentials
import Glibc
import HeraldCore

/// `storage.pool` connections, each on a thread of its own (libpq blocks), never on Swift's
/// cooperative pool. A call goes to the connection with the fewest calls waiting; a connection
/// opens on first use and reopens after the server went away.
final class PGPool: Sendable {
    private final class Slot: Sendable {
        let thread: BlockingThread
        /// Opened on first use, on `thread`, the only one that touches it.
        let connection: ThreadConfined<PGConnection?>
        init(name: String) {
            thread = BlockingThread(name: name)
            connection = ThreadConfined(nil, to: thread.thread)
        }
    }

    private let slots: [Slot]
    private let waiting: Locked<[Int]>
    private let conninfo: String

    init(conninfo: String, size: Int, name: String = "herald-pg") {
        self.conninfo = conninfo
        slots = (0..<max(1, size)).map { Slot(name: "\(name)-\($0)") }
        waiting = Locked(Array(repeating: 0, count: max(1, size)))
    }

    /// Runs `body` with a connection on that connection's thread.
    func run<T: Sendable>(_ body: @escaping @Sendable (PGConnection) throws -> T) async throws -> T {
        let index = waiting.withLock { w -> Int in
            let i = w.indices.min { w[$0] < w[$1] }!
            w[i] += 1
            return i
        }
        defer { waiting.withLock { $0[index] -= 1 } }
        let slot = slots[index], conninfo = self.conninfo
        return try await slot.thread.run {
            if slot.connection.value == nil { slot.connection.value = try PGConnection(conninfo) }
            return try body(slot.connection.value!)
        }
    }

    /// Closes every connection and stops the threads.
    func close() async {
        for slot in slots {
            _ = try? await slot.thread.run { slot.connection.value = nil }
            slot.thread.stop()
        }
    }
}
