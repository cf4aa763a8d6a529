import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM/SIGINT for the simulate commands, through a self-pipe: the handler only writes one
/// byte. Installed before a command announces `listening on …`, so a signal sent as soon as that
/// line is read is never lost to the default action.
enum TerminationSignal {
    /// Installs the handlers; call once, before announcing readiness.
    static func install() {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return }
        terminationPipeRead = fds[0]
        terminationPipeWrite = fds[1]
        signal(SIGPIPE, SIG_IGN)
        for sig in [SIGTERM, SIGINT] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { _ in
                var byte: UInt8 = 1
                _ = write(terminationPipeWrite, &byte, 1)
            }
            sigemptyset(&action.sa_mask)
            sigaction(sig, &action, nil)
        }
    }

    /// Returns once SIGTERM or SIGINT arrives (after ``install()``), without holding a
    /// cooperative thread: the wait happens on a thread of its own.
    static func waitAsync() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            OSThread.start(name: "herald-signals") {
                wait()
                continuation.resume()
            }
        }
    }

    /// Blocks until SIGTERM or SIGINT arrives (after ``install()``).
    static func wait() {
        var byte: UInt8 = 0
        while read(terminationPipeRead, &byte, 1) < 0 && errno == EINTR {}
    }
}

/// The self-pipe (set once, before the handlers are installed).
nonisolated(unsafe) private var terminationPipeWrite: Int32 = -1
nonisolated(unsafe) private var terminationPipeRead: Int32 = -1
