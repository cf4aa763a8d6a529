import Dispatch
import FoundationEssentials
import HeraldCore
import HeraldCrypto
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A small HTTPS server for simulators: real TLS (HeraldCrypto, ALPN `h2` required) and real
/// HTTP/2 (a libnghttp2 server session), one thread per connection, on loopback.
///
/// It parses nothing itself: each complete request (method, path, authority, headers, body) goes
/// to the handler, and the handler's ``SimulatorHTTP2Response`` (status, headers, body) is
/// written back, at once or after the response's ``SimulatorHTTP2Response/delay`` without
/// holding up other streams. The FCM and Web Push simulators are built on it.
///
/// ```swift
/// let server = try SimulatorHTTP2Server(
///     configuration: .init(tls: .init(certificateFile: "server.pem", keyFile: "server.key"))) { request in
///     request.path == "/hello" ? .json(200, #"{"ok":true}"#) : .json(404, #"{"error":"no such path"}"#)
/// }
/// try server.start()          // https://127.0.0.1:\(server.port)
/// …
/// server.stop()
/// ```
///
/// - Important: the handler runs on the connection's own thread, so it is called concurrently
///   when clients open several connections; it must be thread-safe, and it should not block for
///   long (use ``SimulatorHTTP2Response/delay`` for latency).
public final class SimulatorHTTP2Server: Sendable {
    /// Where to listen and how.
    public struct Configuration: Sendable {
        /// The server certificate and key (PEM) for TLS; `nil` serves cleartext h2c with prior
        /// knowledge (for debugging only; clients need `--http2-prior-knowledge`).
        public struct TLS: Sendable {
            public var certificateFile: String
            public var keyFile: String
            /// When set, clients must present a certificate signed by a CA in this file.
            public var clientCAFile: String?

            public init(certificateFile: String, keyFile: String, clientCAFile: String? = nil) {
                self.certificateFile = certificateFile
                self.keyFile = keyFile
                self.clientCAFile = clientCAFile
            }
        }

        /// An IP address: `127.0.0.1` or `::1` in tests.
        public var host: String
        /// 0 picks a free port (read ``SimulatorHTTP2Server/port`` after ``SimulatorHTTP2Server/start()``).
        public var port: Int
        public var tls: TLS?
        /// SETTINGS_MAX_CONCURRENT_STREAMS announced to every client.
        public var maxConcurrentStreams: Int
        /// A request body larger than this is answered 413 without calling the handler.
        public var maxRequestBodyBytes: Int
        /// Thread names start with this (`fcm-sim`, `webpush-sim`), so `top -H` tells servers apart.
        public var threadName: String
        public var logger: Logger

        public init(host: String = "127.0.0.1", port: Int = 0, tls: TLS?, maxConcurrentStreams: Int = 1000,
                    maxRequestBodyBytes: Int = 1 << 20, threadName: String = "h2-sim", logger: Logger = .disabled) {
            self.host = host
            self.port = port
            self.tls = tls
            self.maxConcurrentStreams = maxConcurrentStreams
            self.maxRequestBodyBytes = maxRequestBodyBytes
            self.threadName = threadName
            self.logger = logger
        }
    }

    /// Counts since start.
    public struct Counters: Sendable, Equatable {
        /// Connections accepted.
        public var connections = 0
        /// Complete requests (handed to the handler, or refused as too large).
        public var requests = 0
        /// Streams reset by ``SimulatorHTTP2Response/Action/resetStream``.
        public var resets = 0
        /// Requests left unanswered by ``SimulatorHTTP2Response/Action/noAnswer``.
        public var unanswered = 0
    }

    /// Turns a request into its response; see the type's note on threads.
    public typealias Handler = @Sendable (SimulatorHTTP2Request) -> SimulatorHTTP2Response

    /// The configuration it was made with.
    public let configuration: Configuration
    let core: SimulatorHTTP2ServerCore
    private let state = Locked<RunState>(RunState())

    private struct RunState {
        var listener: SocketListener?
        var acceptDone: DispatchSemaphore?
        var stopped = false
    }

    /// Loads the TLS material; does not listen yet.
    /// - Throws: ``SimulatorHTTP2ServerError`` naming the file or setting at fault.
    public init(configuration: Configuration, handler: @escaping Handler) throws(SimulatorHTTP2ServerError) {
        guard configuration.maxConcurrentStreams >= 1 else {
            throw SimulatorHTTP2ServerError("maxConcurrentStreams must be at least 1, found \(configuration.maxConcurrentStreams)")
        }
        guard configuration.maxRequestBodyBytes >= 0 else {
            throw SimulatorHTTP2ServerError("maxRequestBodyBytes must not be negative, found \(configuration.maxRequestBodyBytes)")
        }
        self.configuration = configuration
        let makeStream: @Sendable (Int32) -> (any SocketByteStream)?
        if let tls = configuration.tls {
            let context: TLSServerContext
            do {
                context = try TLSServerContext(certificateFile: tls.certificateFile, keyFile: tls.keyFile,
                                               clientCAFile: tls.clientCAFile, alpn: ["h2"], requireALPN: true)
            } catch {
                throw SimulatorHTTP2ServerError("cannot set up TLS: \(error.description)")
            }
            let logger = configuration.logger
            makeStream = { fd in
                do {
                    return TLSSocketStream(try TLSConnection.server(fd: fd, context: context))
                } catch {
                    logger.warning("cannot start TLS on an accepted connection", ["error": String(describing: error)])
                    return nil
                }
            }
        } else {
            makeStream = { fd in PlainSocketStream(fd: fd) }
        }
        do {
            core = try SimulatorHTTP2ServerCore(configuration: configuration, handler: handler, makeStream: makeStream)
        } catch {
            throw SimulatorHTTP2ServerError(error)
        }
    }

    deinit { stop() }

    /// Binds the port and starts accepting connections.
    /// - Throws: ``SimulatorHTTP2ServerError`` when the address cannot be bound, or when called twice.
    public func start() throws(SimulatorHTTP2ServerError) {
        let listener: SocketListener
        do {
            listener = try SocketListener(host: configuration.host, port: configuration.port, backlog: 512, accepted: .nonBlocking)
        } catch {
            throw SimulatorHTTP2ServerError(error)
        }
        let done = DispatchSemaphore(value: 0)
        try state.withLock { (s: inout RunState) throws(SimulatorHTTP2ServerError) in
            guard s.listener == nil, !s.stopped else {
                listener.release()
                throw SimulatorHTTP2ServerError("the server was already started; make a new one")
            }
            s.listener = listener
            s.acceptDone = done
        }
        let core = self.core
        let name = configuration.threadName
        OSThread.start(name: "\(name)-accept") {
            while let fd = listener.accept() {
                guard let stream = core.makeStream(fd) else { close(fd); continue }
                let connection = SimulatorHTTP2Connection(id: core.connectionOpened(), fd: fd, stream: stream, core: core)
                OSThread.start(name: "\(name)-conn") { connection.run() }
            }
            listener.release()
            done.signal()
        }
    }

    /// The bound port (0 before ``start()``).
    public var port: Int { state.withLock { $0.listener?.port ?? 0 } }

    /// Counts since start.
    public var counters: Counters { core.counters.withLock { $0 } }

    /// Connections open now (accepted and not yet closed by either side).
    public var openConnections: Int { core.activeConnections }

    /// Stops accepting, closes every connection, and waits (up to 5 s) for them to end.
    public func stop() {
        let (listener, done) = state.withLock { s -> (SocketListener?, DispatchSemaphore?) in
            if s.stopped { return (nil, nil) }
            s.stopped = true
            return (s.listener, s.acceptDone)
        }
        guard let listener else { return }
        listener.close()
        core.signalStop()
        _ = done?.wait(timeout: .now() + 5)
        let end = Date().addingTimeInterval(5)
        while core.activeConnections > 0 && Date() < end { usleep(2_000) }
    }
}

/// What every connection of one ``SimulatorHTTP2Server`` shares: settings, handler, counters, stop signal.
final class SimulatorHTTP2ServerCore: Sendable {
    let handler: SimulatorHTTP2Server.Handler
    let makeStream: @Sendable (Int32) -> (any SocketByteStream)?
    let maxConcurrentStreams: UInt32
    let maxRequestBodyBytes: Int
    let usesTLS: Bool
    let logger: Logger
    let counters = Locked(SimulatorHTTP2Server.Counters())
    /// Readable once the server stops (connections poll it).
    let stopRead: Int32
    private let stopWrite: Int32
    private let active = Atomic<Int>(0)

    init(configuration: SimulatorHTTP2Server.Configuration, handler: @escaping SimulatorHTTP2Server.Handler,
         makeStream: @escaping @Sendable (Int32) -> (any SocketByteStream)?) throws(SimulatorSetupError) {
        self.handler = handler
        self.makeStream = makeStream
        maxConcurrentStreams = UInt32(clamping: configuration.maxConcurrentStreams)
        maxRequestBodyBytes = configuration.maxRequestBodyBytes
        usesTLS = configuration.tls != nil
        logger = configuration.logger
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw SimulatorSetupError("pipe(): \(String(cString: strerror(errno)))") }
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

    /// Counts a new connection (active and accepted) and returns its id.
    func connectionOpened() -> Int {
        active.add(1, ordering: .relaxed)
        return counters.withLock { c in
            c.connections += 1
            return c.connections
        }
    }

    func connectionEnded() { active.subtract(1, ordering: .relaxed) }
    var activeConnections: Int { active.load(ordering: .relaxed) }

    /// Tells every connection to close.
    func signalStop() {
        var byte: UInt8 = 1
        _ = write(stopWrite, &byte, 1)
    }
}
