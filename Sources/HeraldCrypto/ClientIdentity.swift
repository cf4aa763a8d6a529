internal import COpenSSL

/// A client certificate with its private key, for mutual TLS (APNs certificate authentication).
///
/// Load it from PEM files (certificate and key, or one combined file) or from a PKCS#12 (`.p12`)
/// file. The key is checked against the certificate when loading. Safe to share between threads.
public final class ClientIdentity: Sendable {
    let leaf: Certificate
    let chain: [Certificate]
    let key: PKey
    /// Facts about the (leaf) certificate.
    public let certificate: CertificateInfo
    /// Unencrypted PEM of the certificate followed by any chain certificates, e.g. for
    /// libcurl's `CURLOPT_SSLCERT_BLOB`.
    public let certificatePEM: [UInt8]

    /// The private key as unencrypted PKCS#8 PEM, e.g. for libcurl's `CURLOPT_SSLKEY_BLOB`.
    /// - Important: this is the secret key in clear. Hand it straight to the TLS library; never
    ///   log it, write it to disk or keep copies longer than needed.
    public var privateKeyPEM: [UInt8] {
        memoryBIOOutput { PEM_write_bio_PrivateKey($0, key.raw, nil, nil, 0, nil, nil) == 1 } ?? []
    }

    private init(leaf: Certificate, chain: [Certificate], key: PKey) {
        self.leaf = leaf
        self.chain = chain
        self.key = key
        certificate = CertificateInfo(leaf.raw)
        var pem: [UInt8] = []
        for cert in [leaf] + chain {
            pem += memoryBIOOutput { PEM_write_bio_X509($0, cert.raw) == 1 } ?? []
        }
        certificatePEM = pem
    }

    /// Loads a PEM certificate (plus optional chain certificates after it) and its PEM key.
    /// - Parameters:
    ///   - certificateFile: PEM certificate(s), leaf first; may also hold the key ("combined PEM").
    ///   - keyFile: the PEM private key; nil when `certificateFile` holds it.
    ///   - passphrase: for an encrypted key; nil when the key is not encrypted.
    /// - Throws: `.wrongPassphrase` for a wrong or missing passphrase, `.certificateMismatch` when
    ///   the key is not the certificate's, `.unreadableFile` / `.invalidFormat` otherwise.
    public static func load(certificateFile: String, keyFile: String?, passphrase: String?) throws(CryptoError) -> ClientIdentity {
        let certificateBytes = try readFile(certificateFile, what: "certificate")
        let certificates = try loadCertificates(certificateBytes, source: certificateFile)
        let key: PKey
        if let keyFile {
            key = try loadPrivateKey(try readFile(keyFile, what: "private key"), source: keyFile, passphrase: passphrase)
        } else {
            do {
                key = try loadPrivateKey(certificateBytes, source: certificateFile, passphrase: passphrase)
            } catch where error.kind == .invalidFormat("no PEM private key") {
                throw CryptoError(.invalidFormat("no PEM private key"),
                                  "\(certificateFile) holds a certificate but no private key; "
                                  + "give the key file too, or a PEM file holding both")
            }
        }
        try checkKeyMatches(key, certificates[0], keySource: keyFile ?? certificateFile, certificateSource: certificateFile)
        return ClientIdentity(leaf: certificates[0], chain: Array(certificates.dropFirst()), key: key)
    }

    /// Loads a PKCS#12 file as `openssl pkcs12 -export` makes it (OpenSSL 3 defaults, and the
    /// `-legacy` RC2/3DES form when OpenSSL's legacy provider is installed).
    /// - Parameter passphrase: the export passphrase; nil tries an empty one.
    /// - Throws: `.wrongPassphrase` ("wrong passphrase for client.p12"), `.invalidFormat`,
    ///   `.certificateMismatch`, `.unreadableFile`.
    public static func load(p12File: String, passphrase: String?) throws(CryptoError) -> ClientIdentity {
        let bytes = try readFile(p12File, what: "PKCS#12 file")
        ERR_clear_error()
        let p12: OpaquePointer? = try withMemoryBIO(bytes) { bio in d2i_PKCS12_bio(bio, nil) }
        guard let p12 else {
            throw CryptoError(.invalidFormat("not PKCS#12"),
                              "\(p12File) is not a PKCS#12 (.p12) file\(openSSLSuffix()); export one with "
                              + "`openssl pkcs12 -export` or from Keychain Access")
        }
        defer { PKCS12_free(p12) }

        // Find the passphrase the MAC accepts: the given one, or for nil an empty or absent one.
        let candidates: [String?] = passphrase.map { [$0] } ?? ["", nil]
        var accepted: String?? = nil
        if PKCS12_mac_present(p12) == 1 {
            for candidate in candidates {
                let ok = candidate.map { PKCS12_verify_mac(p12, $0, -1) } ?? PKCS12_verify_mac(p12, nil, 0)
                if ok == 1 { accepted = .some(candidate); break }
            }
        } else {
            accepted = .some(candidates[0])
        }
        ERR_clear_error()
        guard let pass = accepted else {
            if passphrase == nil {
                throw CryptoError(.wrongPassphrase,
                                  "\(p12File) is protected by a passphrase and none was given; set its passphrase")
            }
            throw CryptoError(.wrongPassphrase, "wrong passphrase for \(p12File); check the passphrase it was exported with")
        }

        var parsed = parse(p12, pass)
        if parsed == nil {
            ERR_clear_error()
            if legacyProviderLoaded { parsed = parse(p12, pass) }
        }
        guard let (keyRaw, certRaw, chainRaw) = parsed else {
            throw CryptoError(.invalidFormat("cannot decrypt PKCS#12"),
                              "cannot decrypt the contents of \(p12File)\(openSSLSuffix()). If it uses old algorithms "
                              + "(RC2/3DES), install OpenSSL's legacy provider or re-export it: "
                              + "openssl pkcs12 -legacy -in old.p12 -nodes | openssl pkcs12 -export -out new.p12")
        }
        ERR_clear_error()
        let key = keyRaw.map(PKey.init)
        let leaf = certRaw.map(Certificate.init)
        var chain: [Certificate] = []
        if let chainRaw {
            for index in 0..<herald_stack_x509_num(chainRaw) {
                if let x509 = herald_stack_x509_value(chainRaw, index), X509_up_ref(x509) == 1 {
                    chain.append(Certificate(x509))
                }
            }
            herald_stack_x509_pop_free(chainRaw)
        }
        guard let leaf else {
            throw CryptoError(.invalidFormat("no certificate"), "\(p12File) holds no certificate")
        }
        guard let key else {
            throw CryptoError(.invalidFormat("no private key"),
                              "\(p12File) holds no private key; export the certificate together with its key")
        }
        try checkKeyMatches(key, leaf, keySource: p12File, certificateSource: p12File)
        return ClientIdentity(leaf: leaf, chain: chain, key: key)
    }

    private static func parse(_ p12: OpaquePointer, _ pass: String?) -> (OpaquePointer?, OpaquePointer?, OpaquePointer?)? {
        var key: OpaquePointer?
        var cert: OpaquePointer?
        var chain: OpaquePointer?
        let ok: Int32 = if let pass {
            PKCS12_parse(p12, pass, &key, &cert, &chain)
        } else {
            PKCS12_parse(p12, nil, &key, &cert, &chain)
        }
        return ok == 1 ? (key, cert, chain) : nil
    }
}
