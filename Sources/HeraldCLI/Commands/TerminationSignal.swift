import Glibc
import HeraldAPNs
import HeraldCore

/// SIGTERM/SIGINT for the simulate commands (a ``SignalStream``). Installed before a command
/// announces `listening on …`, so a signal sent as soon as that line is read is never lost to
/// the default action.
enum TerminationSignal {
    nonisolated(unsafe) private static var signals: SignalStream?

    /// Installs the handlers; call once, before announcing readiness.
    static func install() { signals = SignalStream([SIGTERM, SIGINT]) }

    /// Returns once SIGTERM or SIGINT arrives (after ``install()``).
    static func waitAsync() async { _ = await signals?.next() }
}
