import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What a blocking read returned.
enum BinaryReadResult: Equatable {
    case bytes(Int)
    /// The peer closed (EOF, with or without TLS close_notify).
    case closed
    /// The receive timeout passed with nothing read.
    case timedOut
    case failed(String)
}

/// The seam between the protocol and the transport: plaintext TCP or TLS over an accepted socket.
///
/// The stream owns its socket from creation: ``close()`` releases it. Used from the one thread
/// that owns the connection; all calls block.
protocol BinaryByteStream: AnyObject {
    /// The socket.
    var fd: Int32 { get }
    /// Runs the handshake (TLS); `nil` on success, else why the client was refused.
    func handshake() -> String?
    /// The client's certificate identity (TLS with a client certificate), else `nil`.
    var client: APNsBinaryClientIdentity? { get }
    func read(into buffer: UnsafeMutableRawBufferPointer) -> BinaryReadResult
    /// Writes all of `bytes`; returns a reason on failure.
    func write(_ bytes: [UInt8]) -> String?
    /// Ends the connection (TLS: sends close_notify) and closes the socket.
    func close()
}

/// Makes a stream over an accepted socket. Fails only if no stream could be made, in which
/// case the socket is still the caller's.
typealias BinaryStreamOpener = @Sendable (Int32) -> Result<any BinaryByteStream, BinarySimulatorError>

/// Plaintext TCP (for protocol tests and debugging with `nc`).
final class BinaryPlainStream: BinaryByteStream {
    let fd: Int32
    private var closed = false
    var client: APNsBinaryClientIdentity? { nil }

    init(fd: Int32) { self.fd = fd }

    static let opener: BinaryStreamOpener = { fd in .success(BinaryPlainStream(fd: fd)) }

    func handshake() -> String? { nil }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> BinaryReadResult {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .closed }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { return .timedOut }
            if errno == ECONNRESET { return .closed }
            return .failed(String(cString: strerror(errno)))
        }
    }

    func write(_ bytes: [UInt8]) -> String? {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n > 0 { sent += n; continue }
            if n < 0 && errno == EINTR { continue }
            return String(cString: strerror(errno))
        }
        return nil
    }

    func close() {
        guard !closed else { return }
        closed = true
        BinarySocket.close(fd)
    }

    deinit { close() }
}
