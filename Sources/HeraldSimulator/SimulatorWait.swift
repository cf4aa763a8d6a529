import FoundationEssentials
import Glibc

/// The polling behind the simulators' `waitFor…` methods.
enum SimulatorWait {
    /// Checks `probe` every `interval` nanoseconds until it returns a value (returned) or
    /// `timeout` seconds pass (`nil`); checks once more at the deadline.
    static func value<T>(timeout: Double, every interval: UInt64, _ probe: () -> T?) async -> T? {
        let end = Date().addingTimeInterval(timeout)
        while true {
            if let value = probe() { return value }
            if Date() >= end { return nil }
            try? await Task.sleep(nanoseconds: interval)
        }
    }

    /// Checks `condition` every `interval` nanoseconds until it holds (`true`) or `timeout`
    /// seconds pass (`false`).
    static func until(timeout: Double, every interval: UInt64, _ condition: () -> Bool) async -> Bool {
        await value(timeout: timeout, every: interval) { condition() ? true : nil } ?? false
    }
}
