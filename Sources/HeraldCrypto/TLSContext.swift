internal import COpenSSL

/// An owned `SSL_CTX` (immutable once configured, so shareable) and the ALPN settings its
/// callbacks read. Connections keep it alive for as long as they exist.
final class SSLContext: @unchecked Sendable {
    let raw: OpaquePointer
    private(set) var alpn: UnsafeMutablePointer<herald_alpn_config>?

    init(server: Bool) throws(CryptoError) {
        ensureOpenSSL()
        ERR_clear_error()
        guard let ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()) else {
            throw CryptoError(.other("SSL_CTX_new"), "cannot create a TLS context\(openSSLSuffix())")
        }
        raw = ctx
        _ = herald_ssl_ctx_set_min_tls12(ctx)
        _ = herald_ssl_ctx_set_mode(ctx, Int(herald_ssl_mode_partial_write_moving()))
        _ = herald_ssl_ctx_clear_mode(ctx, herald_ssl_mode_release_buffers())
        herald_ssl_ctx_set_read_ahead(ctx)
    }

    deinit {
        SSL_CTX_free(raw)
        if let alpn { herald_alpn_config_free(alpn) }
    }

    /// Installs the server-side ALPN selection (server preference order).
    func setServerALPN(_ protocols: [String], require: Bool) throws(CryptoError) {
        let wire = try SSLContext.alpnWire(protocols)
        guard let config = wire.withUnsafeBufferPointer({ herald_alpn_config_new($0.baseAddress, UInt32($0.count), require ? 1 : 0) }) else {
            throw CryptoError(.other("out of memory"), "cannot allocate the ALPN settings")
        }
        alpn = config
        herald_ssl_ctx_set_alpn_server(raw, config)
    }

    /// Protocols offered by a client.
    func setClientALPN(_ protocols: [String]) throws(CryptoError) {
        let wire = try SSLContext.alpnWire(protocols)
        guard SSL_CTX_set_alpn_protos(raw, wire, UInt32(wire.count)) == 0 else {  // 0 is success here
            throw CryptoError(.tls("ALPN"), "cannot set the ALPN protocols \(protocols)\(openSSLSuffix())")
        }
    }

    /// Uses `certificates` (leaf first, then chain) and `key` as this side's identity.
    func useIdentity(_ certificates: [Certificate], key: PKey, source: String) throws(CryptoError) {
        ERR_clear_error()
        guard SSL_CTX_use_certificate(raw, certificates[0].raw) == 1 else {
            throw CryptoError(.tls("certificate"), "cannot use the certificate in \(source)\(openSSLSuffix())")
        }
        for extra in certificates.dropFirst() {
            guard herald_ssl_ctx_add1_chain_cert(raw, extra.raw) == 1 else {
                throw CryptoError(.tls("chain"), "cannot use the chain certificates in \(source)\(openSSLSuffix())")
            }
        }
        guard SSL_CTX_use_PrivateKey(raw, key.raw) == 1, SSL_CTX_check_private_key(raw) == 1 else {
            ERR_clear_error()
            throw CryptoError(.certificateMismatch,
                              "the private key does not belong to the certificate in \(source); use the key it was issued for")
        }
    }

    /// Trusts the CA certificates in `caFile` for verifying the peer.
    func trust(caFile: String) throws(CryptoError) {
        _ = try readFile(caFile, what: "CA certificate file")  // a clear error for a missing file
        ERR_clear_error()
        guard SSL_CTX_load_verify_locations(raw, caFile, nil) == 1 else {
            throw CryptoError(.invalidFormat("CA file"),
                              "\(caFile) holds no usable PEM CA certificates\(openSSLSuffix())")
        }
    }

    /// The length-prefixed wire form of ALPN protocol names.
    static func alpnWire(_ protocols: [String]) throws(CryptoError) -> [UInt8] {
        var wire: [UInt8] = []
        for name in protocols {
            let bytes = Array(name.utf8)
            guard (1...255).contains(bytes.count) else {
                throw CryptoError(.tls("ALPN"), "ALPN protocol names must be 1 to 255 bytes long, not \"\(name)\"")
            }
            wire.append(UInt8(bytes.count))
            wire += bytes
        }
        return wire
    }
}

/// Server-side TLS settings: certificate, key, optional client-certificate requirement and ALPN.
///
/// Create once and share between connections and threads.
public final class TLSServerContext: Sendable {
    let context: SSLContext

    /// - Parameters:
    ///   - certificateFile: PEM server certificate, then any chain certificates.
    ///   - keyFile: its unencrypted PEM private key.
    ///   - clientCAFile: when set, clients MUST present a certificate signed by a CA in this PEM
    ///     file (mutual TLS); otherwise no client certificate is asked for.
    ///   - alpn: protocols offered, in preference order, e.g. `["h2"]`.
    ///   - requireALPN: a client that offers none of `alpn` (or no ALPN at all) fails the
    ///     handshake with a `no_application_protocol` alert. Otherwise it proceeds without ALPN.
    public init(certificateFile: String, keyFile: String, clientCAFile: String? = nil,
                alpn: [String] = [], requireALPN: Bool = false) throws(CryptoError) {
        context = try SSLContext(server: true)
        let certificates = try loadCertificates(try readFile(certificateFile, what: "server certificate"), source: certificateFile)
        let key = try loadPrivateKey(try readFile(keyFile, what: "server key"), source: keyFile, passphrase: nil)
        try checkKeyMatches(key, certificates[0], keySource: keyFile, certificateSource: certificateFile)
        try context.useIdentity(certificates, key: key, source: certificateFile)
        let sessionContext = Array("herald".utf8)
        _ = SSL_CTX_set_session_id_context(context.raw, sessionContext, UInt32(sessionContext.count))
        if let clientCAFile {
            try context.trust(caFile: clientCAFile)
            if let names = SSL_load_client_CA_file(clientCAFile) {
                SSL_CTX_set_client_CA_list(context.raw, names)  // takes ownership
            }
            ERR_clear_error()
            herald_ssl_ctx_require_client_cert(context.raw)
        }
        if requireALPN, alpn.isEmpty {
            throw CryptoError(.tls("ALPN"), "requireALPN needs at least one ALPN protocol, such as \"h2\"")
        }
        if !alpn.isEmpty {
            try context.setServerALPN(alpn, require: requireALPN)
        }
    }
}

/// Client-side TLS settings: trusted CAs, optional client identity and ALPN.
///
/// Certificate verification is always on; ``TLSConnection/client(fd:context:serverName:)``
/// checks the server certificate against the host name or IP address. Share freely.
public final class TLSClientContext: Sendable {
    let context: SSLContext

    /// - Parameters:
    ///   - caFile: PEM CA certificates to trust; nil uses the system's CA store.
    ///   - identity: a client certificate to present (mutual TLS).
    ///   - alpn: protocols to offer, in preference order, e.g. `["h2"]`.
    public init(caFile: String?, identity: ClientIdentity? = nil, alpn: [String] = []) throws(CryptoError) {
        context = try SSLContext(server: false)
        herald_ssl_ctx_verify_peer(context.raw)
        if let caFile {
            try context.trust(caFile: caFile)
        } else if SSL_CTX_set_default_verify_paths(context.raw) != 1 {
            throw CryptoError(.tls("system CAs"), "cannot load the system CA certificates\(openSSLSuffix()); give a CA file")
        }
        if let identity {
            try context.useIdentity([identity.leaf] + identity.chain, key: identity.key, source: "the client identity")
        }
        if !alpn.isEmpty { try context.setClientALPN(alpn) }
    }
}
