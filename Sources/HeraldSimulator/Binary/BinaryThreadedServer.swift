import Dispatch
import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// How a connection handler wants its connection ended.
enum BinaryConnectionEnd {
    /// Close at once (the client closed, or failed).
    case close
    /// The server spoke last (an error response, the feedback list): close our side (TLS
    /// close_notify and TCP FIN), then read and discard what the client still sends until it
    /// closes, for up to two seconds. Closing with unread input would reset the connection,
    /// which can destroy the bytes in flight before the client reads them.
    case lingeringClose
}

/// Accepts connections on one thread and serves each on a thread of its own, with blocking I/O.
///
/// Simple and adequate for simulators: a handful of connections, never thousands. ``stop()``
/// wakes every blocked thread (by shutting its socket down) and waits for them to finish.
final class BinaryThreadedServer: Sendable {
    /// Serves one connection after a successful handshake; returns when it is done.
    typealias Handler = @Sendable (_ stream: any BinaryByteStream, _ connection: Int) -> BinaryConnectionEnd
    /// Told when a client is refused at the handshake.
    typealias Refusal = @Sendable (_ connection: Int, _ reason: String) -> Void

    private struct State {
        var stopping = false
        var nextConnection = 1
        /// Sockets of open connections (what ``stop()`` shuts down). A descriptor leaves this
        /// set, under the lock, before it is closed, so stop never touches a reused number.
        var active: Set<Int32> = []
    }

    let listener: SocketListener
    private let opener: BinaryStreamOpener
    private let usesTLS: Bool
    private let handler: Handler
    private let refusal: Refusal
    private let handshakeTimeout: Double
    private let lingerSeconds: Double
    private let state = Locked(State())
    private let threads = DispatchGroup()

    /// Sets up TLS (mutual, from `tls`; plaintext TCP when `nil`) and binds `host:port`; does not
    /// accept yet. - Throws: naming the address or file at fault.
    init(host: String, port: Int, tls: APNsBinaryTLSFiles?, handshakeTimeout: Double = 10,
         lingerSeconds: Double = 2, refusal: @escaping Refusal, handler: @escaping Handler) throws(BinarySimulatorError) {
        if let tls {
            opener = try BinaryTLS.makeOpener(tls)
        } else {
            opener = BinaryPlainStream.opener
        }
        do {
            listener = try SocketListener(host: host, port: port, backlog: 128, accepted: .blocking)
        } catch {
            throw BinarySimulatorError(error)
        }
        self.usesTLS = tls != nil
        self.handler = handler
        self.refusal = refusal
        self.handshakeTimeout = handshakeTimeout
        self.lingerSeconds = lingerSeconds
    }

    /// Starts accepting, then logs `message` (info) with the address and whether TLS is on.
    func start(announcing message: String, to logger: Logger) {
        threads.enter()
        OSThread.start(name: "binary-accept-\(listener.port)") { [self] in
            acceptLoop()
            threads.leave()
        }
        logger.info(message, ["address": "\(listener.host):\(listener.port)", "tls": usesTLS ? "mutual" : "off"])
    }

    private func acceptLoop() {
        defer { listener.release() }
        while let fd = listener.accept() {
            let number: Int? = state.withLock { s in
                if s.stopping { return nil }
                s.active.insert(fd)
                s.nextConnection += 1
                return s.nextConnection - 1
            }
            guard let number else {
                BinarySocket.close(fd)
                break
            }
            threads.enter()
            OSThread.start(name: "binary-conn-\(number)") { [self] in
                serve(fd: fd, connection: number)
                threads.leave()
            }
        }
    }

    private func serve(fd: Int32, connection: Int) {
        BinarySocket.setReceiveTimeout(fd, seconds: handshakeTimeout)
        let stream: any BinaryByteStream
        switch opener(fd) {
        case .failure(let error):
            refusal(connection, error.description)
            release(fd)
            BinarySocket.close(fd)
            return
        case .success(let s):
            stream = s
        }
        if let reason = stream.handshake() {
            refusal(connection, reason)
            release(fd)
            stream.close()
            return
        }
        BinarySocket.setReceiveTimeout(fd, seconds: 0)
        switch handler(stream, connection) {
        case .close:
            release(fd)
            stream.close()
        case .lingeringClose:
            // A duplicate keeps the socket open after the stream closes its descriptor (sending
            // close_notify), so our side can send FIN and still read the client's leftovers.
            let copy = dup(fd)
            state.withLock { s in
                s.active.remove(fd)
                if copy >= 0 { s.active.insert(copy) }
            }
            stream.close()
            guard copy >= 0 else { return }
            LingeringClose.drain(copy, seconds: lingerSeconds)
            release(copy)
            BinarySocket.close(copy)
        }
    }

    private func release(_ fd: Int32) { state.withLock { _ = $0.active.remove(fd) } }

    /// Stops accepting, wakes every connection thread, and waits (up to `timeout`) for them.
    func stop(timeout: Double = 5) {
        let first: Bool = state.withLock { s in
            if s.stopping { return false }
            s.stopping = true
            for fd in s.active { BinarySocket.shutdownBoth(fd) }
            return true
        }
        if first { listener.close() }
        _ = threads.wait(timeout: .now() + timeout)
    }
}
