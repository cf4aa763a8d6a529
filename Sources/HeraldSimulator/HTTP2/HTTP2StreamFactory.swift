import HeraldAPNs
import HeraldCore
import HeraldCrypto
#if canImport(Glibc)
import Glibc
#endif

/// Makes the byte stream for each accepted socket: TLS (ALPN `h2` required) or cleartext.
enum HTTP2StreamFactory {
    static func make(_ tls: APNsHTTP2Simulator.TLS?, logger: Logger) throws(HTTP2SimulatorError) -> @Sendable (Int32) -> (any SocketByteStream)? {
        guard let tls else { return { fd in PlainSocketStream(fd: fd) } }
        let context: TLSServerContext
        do {
            context = try TLSServerContext(certificateFile: tls.certificateFile, keyFile: tls.keyFile,
                                           clientCAFile: tls.clientCAFile, alpn: ["h2"], requireALPN: true)
        } catch {
            throw HTTP2SimulatorError("cannot set up TLS: \(error.description)")
        }
        return { fd in
            do {
                return TLSSocketStream(try TLSConnection.server(fd: fd, context: context))
            } catch {
                logger.warning("cannot start TLS on an accepted connection", ["error": String(describing: error)])
                return nil
            }
        }
    }
}

/// TLS over a non-blocking socket (HeraldCrypto's ``TLSConnection``, which owns the socket).
final class TLSSocketStream: SocketByteStream {
    private let tls: TLSConnection
    private var isClosed = false

    init(_ tls: TLSConnection) { self.tls = tls }

    @inline(__always)
    private static func map(_ result: TLSConnection.IOResult) -> SocketIOResult {
        switch result {
        case .bytes(let n): return .bytes(n)
        case .wantRead: return .wantRead
        case .wantWrite: return .wantWrite
        case .closed: return .closed
        case .failed(let why): return .failed(why)
        }
    }

    func handshake() -> SocketIOResult { Self.map(tls.handshake()) }
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketIOResult { Self.map(tls.read(into: buffer)) }
    func write(_ bytes: UnsafeRawBufferPointer) -> SocketIOResult { Self.map(tls.write(bytes)) }
    var negotiatedALPN: String? { tls.negotiatedALPN }
    var peerTopics: [String] { tls.peerCertificate?.topics ?? [] }

    func close(graceful: Bool, linger: Bool) {
        guard !isClosed else { return }
        isClosed = true
        if graceful && linger {
            // close_notify, then FIN and a short drain on a duplicate of the socket, so the
            // client reads every answer (and the GOAWAY) before the connection goes away.
            let copy = dup(tls.fd)
            tls.shutdown()
            LingeringClose.finish(copy)
        } else if graceful {
            tls.shutdown()  // close_notify, then closes the socket
        } else {
            // FIN now, no close_notify; the socket itself is closed when `tls` goes away.
            Glibc.shutdown(tls.fd, Int32(SHUT_RDWR))
        }
    }
}
