import FoundationEssentials
import HeraldCore

/// `matrix.maxDevicesPerApp`: how many devices (pushkeys) the gateway may keep per `app_id`.
///
/// The count of each `app_id`'s devices is read from the store once (a listing limited to the
/// cap plus one), then kept in memory: a new pushkey takes a slot before it is registered, and
/// gives it back when the store says it was not new after all. Devices removed meanwhile (by
/// `herald prune`, the devices API or another node) are seen at the next recount, which happens
/// only when the cap is reached and at most once per ``recountInterval``, so the count errs on
/// the side of refusing. Several notifies racing at the cap may overshoot it by as many.
final class MatrixDeviceLimit: Sendable {
    /// The shortest time between two recounts of one `app_id` at its cap.
    static let recountInterval: TimeInterval = 60

    private struct Entry {
        var count: Int
        var countedAt: Date
    }

    private let entries = Locked<[String: Entry]>([:])

    init() {}

    /// Takes a slot for a new device of `appID`; `false` when the app is at `cap`.
    /// - Parameter recount: the number of the app's devices in the store (at most `cap + 1` counted).
    func reserve(_ appID: String, cap: Int, now: Date, recount: () async throws -> Int) async throws -> Bool {
        let decided: Bool? = entries.withLock { e in
            guard var entry = e[appID] else { return nil }
            if entry.count < cap {
                entry.count += 1
                e[appID] = entry
                return true
            }
            return now.timeIntervalSince(entry.countedAt) < Self.recountInterval ? false : nil
        }
        if let decided { return decided }
        let counted = try await recount()
        return entries.withLock { e in
            if counted < cap {
                e[appID] = Entry(count: counted + 1, countedAt: now)
                return true
            }
            e[appID] = Entry(count: counted, countedAt: now)
            return false
        }
    }

    /// Gives back a slot taken by ``reserve(_:cap:now:recount:)`` for a device that was not new.
    func release(_ appID: String) {
        entries.withLock { e in
            if var entry = e[appID], entry.count > 0 {
                entry.count -= 1
                e[appID] = entry
            }
        }
    }
}
