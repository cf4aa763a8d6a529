internal import COpenSSL
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One TLS connection over a connected socket that it owns and closes.
///
/// Works with blocking sockets (calls block) and non-blocking ones (calls return
/// ``IOResult/wantRead`` / ``IOResult/wantWrite``: wait for that readiness, then repeat the same
/// call; a `write` must be repeated with the same bytes). Writes may be partial.
/// `read` and `write` do not allocate in Swift (OpenSSL 3.0 itself makes a few short-lived
/// allocations per TLS record). A blocking socket with `SO_RCVTIMEO`/`SO_SNDTIMEO` reports a
/// timeout as `.wantRead`/`.wantWrite`.
/// - Important: not thread-safe: one owner thread at a time.
/// - Note: the first use of HeraldCrypto sets SIGPIPE to be ignored when the program has not
///   installed a handler, so a write to a closed peer fails with `.failed`/`.closed` instead of
///   killing the process.
public final class TLSConnection: @unchecked Sendable {
    /// The outcome of a handshake, read or write.
    public enum IOResult: Equatable, Sendable {
        /// This many bytes were read or written (0 for a finished handshake).
        case bytes(Int)
        /// Non-blocking socket: wait until it is readable and call again.
        case wantRead
        /// Non-blocking socket: wait until it is writable and call again.
        case wantWrite
        /// The peer closed the connection (with or without TLS close_notify).
        case closed
        /// A TLS or socket error; the connection is unusable.
        case failed(String)
    }

    private let ssl: OpaquePointer
    private let context: SSLContext  // keeps the SSL_CTX and its ALPN settings alive
    private var isShutDown = false
    private var hadFatalError = false
    private let isServer: Bool

    /// The socket.
    public let fd: Int32

    private init(fd: Int32, context: SSLContext, isServer: Bool) throws(CryptoError) {
        ERR_clear_error()
        guard let ssl = SSL_new(context.raw) else {
            throw CryptoError(.other("SSL_new"), "cannot create a TLS connection\(openSSLSuffix())")
        }
        guard SSL_set_fd(ssl, fd) == 1 else {
            SSL_free(ssl)
            throw CryptoError(.other("SSL_set_fd"), "cannot attach TLS to socket \(fd)\(openSSLSuffix())")
        }
        self.ssl = ssl
        self.context = context
        self.fd = fd
        self.isServer = isServer
        if isServer { SSL_set_accept_state(ssl) } else { SSL_set_connect_state(ssl) }
    }

    deinit {
        if !isShutDown { close(fd) }
        SSL_free(ssl)
    }

    /// Server side of a connection accepted on `fd`. Does not handshake yet.
    /// - Throws: only when OpenSSL cannot allocate; `fd` then stays open and the caller's.
    public static func server(fd: Int32, context: TLSServerContext) throws(CryptoError) -> TLSConnection {
        try TLSConnection(fd: fd, context: context.context, isServer: true)
    }

    /// Client side over a connected `fd`. Does not handshake yet.
    /// - Parameter serverName: the host name (sent as SNI and checked against the certificate's
    ///   DNS names) or an IPv4/IPv6 literal (checked against its IP addresses; no SNI).
    /// - Throws: when OpenSSL cannot allocate or `serverName` is unusable; `fd` then stays open
    ///   and the caller's.
    public static func client(fd: Int32, context: TLSClientContext, serverName: String) throws(CryptoError) -> TLSConnection {
        let connection = try TLSConnection(fd: fd, context: context.context, isServer: false)
        var name = serverName
        if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
        let ok: Bool
        if isIPAddress(name) {
            ok = herald_ssl_set_expected_ip(connection.ssl, name) == 1
        } else {
            ok = herald_ssl_set_expected_host(connection.ssl, name) == 1 && herald_ssl_set_sni(connection.ssl, name) == 1
        }
        guard ok else {
            connection.isShutDown = true  // leave fd open for the caller
            throw CryptoError(.tls("server name"), "cannot use \"\(serverName)\" as the TLS server name\(openSSLSuffix())")
        }
        return connection
    }

    /// Runs (or continues) the handshake. `.bytes(0)` when it has finished.
    public func handshake() -> IOResult {
        clearStaleErrors()
        while true {
            let r = SSL_do_handshake(ssl)
            if r == 1 {
                // Belt and braces: verification is always on, so this cannot fail unless misconfigured.
                if SSL_get_verify_result(ssl) != Int(X509_V_OK) {
                    hadFatalError = true
                    return .failed("peer verification failed" + verifyHint())
                }
                return .bytes(0)
            }
            let result = failure(r, duringHandshake: true)
            if result != .bytes(0) { return result }  // .bytes(0) here means "interrupted, retry"
        }
    }

    /// Reads decrypted bytes into `buffer`.
    /// - Returns: `.bytes(n)` with n ≥ 1 (`.bytes(0)` only for an empty buffer), `.closed` at
    ///   end of stream, `.wantRead`/`.wantWrite` on a non-blocking socket.
    /// - Important: decrypted bytes can stay buffered inside TLS after a read: with a
    ///   non-blocking socket keep reading until `.wantRead` before waiting for readiness again
    ///   (or check ``hasBufferedData``).
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return .bytes(0) }
        while true {
            clearStaleErrors()
            var count = 0
            if SSL_read_ex(ssl, base, buffer.count, &count) == 1 { return .bytes(count) }
            let result = failure(0, duringHandshake: false)
            if result != .bytes(0) { return result }
        }
    }

    /// Writes bytes; may write only part of them (`.bytes(n)`, n ≥ 1).
    /// After `.wantRead`/`.wantWrite`, call again with the same (remaining) bytes.
    public func write(_ bytes: UnsafeRawBufferPointer) -> IOResult {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return .bytes(0) }
        while true {
            clearStaleErrors()
            var count = 0
            if SSL_write_ex(ssl, base, bytes.count, &count) == 1 { return .bytes(count) }
            let result = failure(0, duringHandshake: false)
            if result != .bytes(0) { return result }
        }
    }

    /// Whether TLS holds received data not yet returned by ``read(into:)`` (so the socket may
    /// not become readable again before it is read).
    public var hasBufferedData: Bool { SSL_has_pending(ssl) == 1 }

    /// The protocol chosen by ALPN (e.g. "h2"), or nil.
    public var negotiatedALPN: String? {
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// The TLS version in use after the handshake, e.g. "TLSv1.3".
    public var protocolVersion: String { String(cString: SSL_get_version(ssl)) }

    /// The peer's certificate: the client's as seen by a server, the server's as seen by a client.
    public var peerCertificate: CertificateInfo? {
        guard let x509 = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(x509) }
        return CertificateInfo(x509)
    }

    /// Sends close_notify (best effort, without waiting for the peer's) and closes the socket.
    /// Calling it again does nothing.
    public func shutdown() {
        guard !isShutDown else { return }
        isShutDown = true
        if !hadFatalError, SSL_is_init_finished(ssl) == 1 {
            ERR_clear_error()
            _ = SSL_shutdown(ssl)
            ERR_clear_error()
        }
        close(fd)
    }

    /// SSL_get_error needs an empty error queue before each call (peeking is cheaper than clearing).
    @inline(__always)
    private func clearStaleErrors() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
        errno = 0  // so a failure's errno is this call's, not a leftover
    }

    /// Maps a failed call to an ``IOResult``; `.bytes(0)` means "interrupted by a signal, retry".
    private func failure(_ returnCode: Int32, duringHandshake: Bool) -> IOResult {
        let savedErrno = errno
        let code = SSL_get_error(ssl, returnCode)
        switch code {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            return duringHandshake ? .failed("the peer closed the connection during the TLS handshake") : .closed
        case SSL_ERROR_SYSCALL:
            hadFatalError = true
            let queued = openSSLErrors()
            if savedErrno == EINTR, queued.isEmpty { hadFatalError = false; return .bytes(0) }
            if savedErrno == 0 || savedErrno == ECONNRESET || savedErrno == EPIPE {
                if duringHandshake {
                    return .failed("the peer closed the connection during the TLS handshake" + verifyHint())
                }
                return .closed
            }
            return .failed("socket error: \(String(cString: strerror(savedErrno)))" + (queued.isEmpty ? "" : " (\(queued))"))
        case SSL_ERROR_SSL:
            hadFatalError = true
            let first = ERR_peek_error()
            if !duringHandshake, herald_err_get_lib(first) == ERR_LIB_SSL,
               herald_err_get_reason(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING {
                ERR_clear_error()
                return .closed  // EOF without close_notify: common and harmless for framed protocols
            }
            let queued = openSSLErrors()
            return .failed((queued.isEmpty ? "TLS error" : queued) + verifyHint())
        default:
            hadFatalError = true
            return .failed("TLS error \(code)\(openSSLSuffix())")
        }
    }

    /// "; certificate verify failed: …" when peer verification is what failed.
    private func verifyHint() -> String {
        let result = SSL_get_verify_result(ssl)
        guard result != Int(X509_V_OK), let text = X509_verify_cert_error_string(result) else { return "" }
        let who = isServer ? "the client certificate" : "the server certificate"
        return "; \(who) failed verification: \(String(cString: text))"
    }
}

/// Whether `text` is an IPv4 or IPv6 address literal.
func isIPAddress(_ text: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
}
