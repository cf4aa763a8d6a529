import Glibc

/// Delivers process signals (SIGTERM, SIGINT, SIGHUP) as an async sequence, through a
/// self-pipe: the handler only writes the signal's number, a thread of its own reads it and
/// yields it. Signals that arrive before anyone iterates ``stream`` wait in it.
///
/// - Important: the handlers are process-wide: create one stream per process, before the
///   process announces that it serves, so that a signal sent as soon as `listening on …` is
///   read is never lost to the default action (which kills the process).
public final class SignalStream: Sendable {
    /// The signals as they arrive, in order.
    public let stream: AsyncStream<Int32>

    /// Installs handlers for `signals` (and ignores SIGPIPE: a closed socket is an error to
    /// handle, not a reason to die).
    public init(_ signals: [Int32]) {
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        self.stream = stream
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { fatalError("cannot create the signal pipe: \(String(cString: strerror(errno)))") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        // A handler never blocks: with the pipe full, the signal is dropped (one is enough).
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        signal(SIGPIPE, SIG_IGN)
        signalPipeWrite = fds[1]
        let readEnd = fds[0]
        OSThread.start(name: "herald-signals", stackSize: 64 * 1024) {
            var byte: UInt8 = 0
            while true {
                let n = read(readEnd, &byte, 1)
                if n == 1 { continuation.yield(Int32(byte)) } else if n < 0 && errno == EINTR { continue } else { return }
            }
        }
        for s in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { signal in
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: signal)
                _ = write(signalPipeWrite, &byte, 1)
                errno = saved
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(s, &action, nil)
        }
    }

    /// Waits for the first of the signals (after ``init(_:)``).
    public func next() async -> Int32? {
        var iterator = stream.makeAsyncIterator()
        return await iterator.next()
    }
}

/// The self-pipe's write end (set before the handlers are installed).
nonisolated(unsafe) private var signalPipeWrite: Int32 = -1
