import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// Where a command writes: results to stdout, errors and progress to stderr.
package struct Console: Sendable {
    package init() {}
    /// Writes a line to standard output.
    package func out(_ text: String) { FileDescriptorOutput.standardOutput(text + "\n") }
    /// Writes a line to standard error.
    package func err(_ text: String) { FileDescriptorOutput.standardError(text + "\n") }
    /// Writes without a newline (progress bars).
    package func errRaw(_ text: String) { FileDescriptorOutput.standardError(text) }

    /// Whether stderr is a terminal (progress bars are drawn only there).
    var stderrIsTerminal: Bool { isatty(2) != 0 }
}

/// A one-line progress bar on stderr, redrawn at most ten times a second.
final class ProgressBar: @unchecked Sendable {
    private let total: Int
    private let console: Console
    private let lock = ConditionLock()
    private var done = 0
    private var counts: [String: Int] = [:]
    private var lastDraw = Date.distantPast
    private let start = Date()

    init(total: Int, console: Console) {
        self.total = total
        self.console = console
    }

    func advance(outcome: String) {
        lock.lock()
        defer { lock.unlock() }
        done += 1
        counts[outcome, default: 0] += 1
        let now = Date()
        if done == total || now.timeIntervalSince(lastDraw) >= 0.1 {
            lastDraw = now
            draw()
        }
    }

    private func draw() {
        let width = 30
        let fraction = total == 0 ? 1 : Double(done) / Double(total)
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let rate = Double(done) / max(Date().timeIntervalSince(start), 0.001)
        let tally = counts.keys.sorted().map { "\($0) \(counts[$0]!)" }.joined(separator: ", ")
        console.errRaw("\r[\(bar)] \(done)/\(total) \(Int(rate))/s  \(tally)\u{1B}[K")
        if done == total { console.errRaw("\n") }
    }
}
