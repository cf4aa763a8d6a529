import FoundationEssentials
import HeraldAPNs
import HeraldCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What every connection of one HTTP/2 simulator shares: rules, faults, recorder, stop signal.
final class HTTP2ServerCore: Sendable {
    /// `nil` with certificate authentication.
    let authenticator: HTTP2TokenAuthenticator?
    let topics: [String]
    let recorder: HTTP2Recorder
    let faults: HTTP2FaultBoard
    let sandbox: Bool
    let maxConcurrentStreams: UInt32
    let singleStreamUntilAuthenticated: Bool
    let clock: any WallClock
    let logger: Logger
    /// Makes the byte stream for an accepted socket (TLS, or plaintext); `nil` to refuse it.
    let makeStream: @Sendable (Int32) -> (any SocketByteStream)?
    let usesTLS: Bool
    /// Broadcast channels, shared with the management port.
    let channels: APNsChannelStore
    let broadcastRules: HTTP2BroadcastRules

    /// Readable once the simulator stops (connections poll it).
    let stopRead: Int32
    private let stopWrite: Int32
    private let nextConnectionID = Atomic<Int>(0)
    private let active = Locked<Int>(0)

    init(authenticator: HTTP2TokenAuthenticator?, topics: [String], recorder: HTTP2Recorder, faults: HTTP2FaultBoard,
         sandbox: Bool, maxConcurrentStreams: Int, singleStreamUntilAuthenticated: Bool, clock: any WallClock,
         logger: Logger, usesTLS: Bool, channels: APNsChannelStore = APNsChannelStore(), makeStream: @escaping @Sendable (Int32) -> (any SocketByteStream)?) throws(HTTP2SimulatorError) {
        self.authenticator = authenticator
        self.topics = topics
        self.recorder = recorder
        self.faults = faults
        self.sandbox = sandbox
        self.maxConcurrentStreams = UInt32(clamping: maxConcurrentStreams)
        self.singleStreamUntilAuthenticated = singleStreamUntilAuthenticated
        self.clock = clock
        self.logger = logger
        self.usesTLS = usesTLS
        self.makeStream = makeStream
        self.channels = channels
        broadcastRules = HTTP2BroadcastRules(store: channels)
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            throw HTTP2SimulatorError("pipe(): \(String(cString: strerror(errno)))")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        stopRead = fds[0]
        stopWrite = fds[1]
    }

    deinit {
        close(stopRead)
        close(stopWrite)
    }

    func newConnectionID() -> Int { nextConnectionID.add(1, ordering: .relaxed).newValue }

    /// Tells every connection to close.
    func signalStop() {
        var byte: UInt8 = 1
        _ = write(stopWrite, &byte, 1)
    }

    func connectionStarted() { active.withLock { $0 += 1 } }
    func connectionEnded() { active.withLock { $0 -= 1 } }
    var activeConnections: Int { active.withLock { $0 } }
}
