import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// Where a command writes: results to stdout, errors and progress to stderr.
///
/// Every line goes through ``TerminalText/escaped(_:)``: a control character in it (a CR, LF or
/// ESC from a stored token, user, attribute or reason) is printed as `\r`, `\n`, `\u001b`, so
/// nothing a caller stored can forge a line or drive the terminal. A JSON line stays valid JSON.
package struct Console: Sendable {
    package init() {}
    /// Writes one line to standard output (control characters in `line` escaped).
    package func out(_ line: String) { FileDescriptorOutput.standardOutput(TerminalText.escaped(line) + "\n") }
    /// Writes one line to standard error (control characters in `line` escaped).
    package func err(_ line: String) { FileDescriptorOutput.standardError(TerminalText.escaped(line) + "\n") }
    /// Writes lines to standard output, each escaped as ``out(_:)`` does.
    package func out(lines: [String]) { for line in lines { out(line) } }
    /// Writes lines to standard error, each escaped as ``err(_:)`` does.
    package func err(lines: [String]) { for line in lines { err(line) } }
    /// Writes Herald's own text of several lines (help, overviews): split at its line breaks,
    /// each line escaped. Never for text holding what a caller sent: use ``out(_:)`` per line.
    package func outText(_ text: String) { out(lines: text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)) }
    /// Herald's own text of several lines to standard error (see ``outText(_:)``).
    package func errText(_ text: String) { err(lines: text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)) }
    /// Writes without a newline and without escaping (the progress bar's own `\r` and ESC
    /// sequences); never for text holding what a caller sent.
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
