#if canImport(Glibc)
import Glibc
#endif

/// The outcome of one read or write on a connection.
enum SocketIOResult: Sendable, Equatable {
    /// This many bytes moved (never 0).
    case bytes(Int)
    /// Try again when the socket is readable.
    case wantRead
    /// Try again when the socket is writable.
    case wantWrite
    /// The peer closed the connection.
    case closed
    /// The connection failed; the text says why.
    case failed(String)
}

/// A connection's byte stream: plaintext TCP, or TLS over it.
///
/// The seam between the simulators' protocol code and TLS; every call is non-blocking.
protocol SocketByteStream: AnyObject {
    /// Advances the handshake; `.bytes(0)` when it is complete.
    func handshake() -> SocketIOResult
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketIOResult
    func write(_ bytes: UnsafeRawBufferPointer) -> SocketIOResult
    /// The protocol ALPN chose (`h2`), `nil` without TLS or ALPN.
    var negotiatedALPN: String? { get }
    /// The client certificate's APNs topics (Apple's topics extension, else its subject UID);
    /// empty without a client certificate.
    var peerTopics: [String] { get }
    /// Ends the connection and closes the socket. `graceful`: TLS close_notify first (when there
    /// is TLS); otherwise the socket is shut down at once (FIN, no close_notify). `linger`: after
    /// a graceful end the server chose (GOAWAY), send FIN and drain the client's leftovers
    /// briefly (see ``LingeringClose``). Call once.
    func close(graceful: Bool, linger: Bool)
}

/// Plaintext TCP on a non-blocking socket (h2c with prior knowledge, for debugging).
/// Owns and closes the socket.
final class PlainSocketStream: SocketByteStream {
    let fd: Int32
    private var isClosed = false

    init(fd: Int32) { self.fd = fd }

    deinit { close(graceful: false, linger: false) }

    func handshake() -> SocketIOResult { .bytes(0) }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketIOResult {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wantRead
            case ECONNRESET: return .closed
            default: return .failed(String(cString: strerror(errno)))
            }
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> SocketIOResult {
        while true {
            let n = send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return .bytes(n) }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wantWrite
            case EPIPE, ECONNRESET: return .closed
            default: return .failed(String(cString: strerror(errno)))
            }
        }
    }

    var negotiatedALPN: String? { nil }
    var peerTopics: [String] { [] }

    func close(graceful: Bool, linger: Bool) {
        guard !isClosed else { return }
        isClosed = true
        if graceful && linger {
            LingeringClose.finish(fd)
        } else if graceful {
            Glibc.close(fd)
        } else {
            Glibc.shutdown(fd, Int32(SHUT_RDWR))
            Glibc.close(fd)
        }
    }
}
