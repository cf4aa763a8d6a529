import HeraldCore

/// Makes the byte stream for each accepted socket: TLS (ALPN `h2`) or cleartext.
enum HTTP2StreamFactory {
    static func make(_ tls: APNsHTTP2Simulator.TLS?, logger: Logger) throws(HTTP2SimulatorError) -> @Sendable (Int32) -> (any SocketByteStream)? {
        guard tls == nil else {
            throw HTTP2SimulatorError("TLS is not available in this build yet (waiting for HeraldCrypto)")
        }
        return { fd in PlainSocketStream(fd: fd) }
    }
}
