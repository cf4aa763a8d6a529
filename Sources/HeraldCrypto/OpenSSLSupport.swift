internal import COpenSSL
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One-time OpenSSL set-up (and SIGPIPE ignored unless the program installed a handler).
private let openSSLInitialised: Bool = herald_openssl_init() == 1

/// Makes sure OpenSSL is initialised; cheap after the first call.
@inline(__always)
func ensureOpenSSL() { _ = openSSLInitialised }

/// The legacy provider (RC2, DES…) for old PKCS#12 files, loaded on first need. False when absent.
let legacyProviderLoaded: Bool = {
    ensureOpenSSL()
    // Loading one provider explicitly stops the default one from auto-loading: load both.
    guard OSSL_PROVIDER_load(nil, "default") != nil else { return false }
    return OSSL_PROVIDER_load(nil, "legacy") != nil
}()

/// SHA-256 fetched once from the default provider (saves an implicit fetch on every digest).
private final class FetchedDigest: @unchecked Sendable {
    let raw: OpaquePointer?
    init() {
        ensureOpenSSL()
        raw = EVP_MD_fetch(nil, "SHA256", nil)
    }
}
private let fetchedSHA256 = FetchedDigest()

/// The SHA-256 `EVP_MD` to pass to digest and signature calls.
var sha256Digest: OpaquePointer? { fetchedSHA256.raw ?? EVP_sha256() }

/// Drains this thread's OpenSSL error queue into one line ("" when empty).
func openSSLErrors() -> String {
    var reasons: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        let text: String
        if let reason = ERR_reason_error_string(code) {
            text = String(cString: reason)
        } else {
            text = "error \(String(code, radix: 16))"
        }
        if !reasons.contains(text) { reasons.append(text) }
    }
    return reasons.joined(separator: "; ")
}

/// " (OpenSSL: reason)" or "" — for appending to messages.
func openSSLSuffix() -> String {
    let errors = openSSLErrors()
    return errors.isEmpty ? "" : " (OpenSSL: \(errors))"
}

/// An owned `EVP_PKEY`. OpenSSL 3 keys are safe to use from several threads once loaded.
final class PKey: @unchecked Sendable {
    let raw: OpaquePointer
    init(_ raw: OpaquePointer) { self.raw = raw }
    deinit { EVP_PKEY_free(raw) }
}

/// An owned `X509`; immutable after loading.
final class Certificate: @unchecked Sendable {
    let raw: OpaquePointer
    init(_ raw: OpaquePointer) { self.raw = raw }
    deinit { X509_free(raw) }
}

/// Reads a whole file, or throws `.unreadableFile` naming it and the system's reason.
func readFile(_ path: String, what: String) throws(CryptoError) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else {
        let reason = String(cString: strerror(errno))
        throw CryptoError(.unreadableFile(path), "cannot read \(what) \(path): \(reason); check the path and its permissions")
    }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16384)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n > 0 {
            bytes.append(contentsOf: chunk[0..<n])
        } else if n == 0 {
            break
        } else if errno != EINTR {
            let reason = String(cString: strerror(errno))
            throw CryptoError(.unreadableFile(path), "cannot read \(what) \(path): \(reason)")
        }
        if bytes.count > 16 << 20 {
            throw CryptoError(.invalidFormat("file too large"), "\(path) is larger than 16 MB; it is not a \(what)")
        }
    }
    return bytes
}

/// Runs `body` with a read-only memory BIO over `bytes` (which it does not copy).
func withMemoryBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) throws(CryptoError) -> R) throws(CryptoError) -> R {
    ensureOpenSSL()
    let input = bytes.isEmpty ? [0] : bytes  // BIO_new_mem_buf refuses a NULL buffer
    let result: Result<R, CryptoError> = input.withUnsafeBytes { raw in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(bytes.count)) else {
            return .failure(CryptoError(.other("BIO_new_mem_buf"), "out of memory reading PEM data"))
        }
        defer { BIO_free(bio) }
        do throws(CryptoError) {
            return .success(try body(bio))
        } catch {
            return .failure(error)
        }
    }
    return try result.get()
}

/// Collects what `write` puts into a fresh memory BIO.
func memoryBIOOutput(_ write: (OpaquePointer) -> Bool) -> [UInt8]? {
    ensureOpenSSL()
    guard let bio = BIO_new(BIO_s_mem()) else { return nil }
    defer { BIO_free(bio) }
    guard write(bio) else { return nil }
    var data: UnsafeMutablePointer<CChar>?
    let length = herald_bio_get_mem_data(bio, &data)
    guard length >= 0, let data else { return [] }
    return Array(UnsafeRawBufferPointer(start: data, count: length))
}

/// Reads a PEM private key (PKCS#8, SEC1 "EC PRIVATE KEY", PKCS#1, or encrypted forms) from
/// `bytes`, skipping other PEM blocks such as certificates. `source` names the file in errors.
func loadPrivateKey(_ bytes: [UInt8], source: String, passphrase: String?) throws(CryptoError) -> PKey {
    ERR_clear_error()
    var asked: Int32 = 0
    let key: OpaquePointer? = try withMemoryBIO(bytes) { bio in
        if let passphrase {
            return passphrase.withCString { herald_pem_read_private_key(bio, $0, &asked) }
        }
        return herald_pem_read_private_key(bio, nil, &asked)
    }
    if let key {
        ERR_clear_error()
        return PKey(key)
    }
    let detail = openSSLSuffix()
    if asked != 0 {
        if passphrase == nil {
            throw CryptoError(.wrongPassphrase,
                              "\(source) holds an encrypted private key and no passphrase was given; set its passphrase")
        }
        throw CryptoError(.wrongPassphrase, "wrong passphrase for \(source); check the passphrase for this key")
    }
    throw CryptoError(.invalidFormat("no PEM private key"),
                      "\(source) holds no readable PEM private key (expected -----BEGIN PRIVATE KEY-----, "
                      + "EC PRIVATE KEY or ENCRYPTED PRIVATE KEY)\(detail)")
}

/// Reads every certificate in `bytes`: PEM (several allowed, leaf first) or a single DER certificate.
func loadCertificates(_ bytes: [UInt8], source: String) throws(CryptoError) -> [Certificate] {
    ERR_clear_error()
    var certificates: [Certificate] = []
    try withMemoryBIO(bytes) { bio throws(CryptoError) in
        while let x509 = herald_pem_read_x509(bio) { certificates.append(Certificate(x509)) }
    }
    ERR_clear_error()  // the loop ends with "no start line"
    if certificates.isEmpty, bytes.first == 0x30 {
        let x509: OpaquePointer? = bytes.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        if let x509 { certificates.append(Certificate(x509)) }
    }
    guard !certificates.isEmpty else {
        throw CryptoError(.invalidFormat("no certificate"),
                          "\(source) holds no certificate (expected -----BEGIN CERTIFICATE----- PEM or DER)\(openSSLSuffix())")
    }
    return certificates
}

/// Checks that `key` belongs to `certificate`, or throws `.certificateMismatch`.
func checkKeyMatches(_ key: PKey, _ certificate: Certificate, keySource: String, certificateSource: String) throws(CryptoError) {
    ERR_clear_error()
    guard X509_check_private_key(certificate.raw, key.raw) == 1 else {
        ERR_clear_error()
        let subject = CertificateInfo(certificate.raw).subject
        throw CryptoError(.certificateMismatch,
                          "the private key in \(keySource) does not belong to the certificate in \(certificateSource) "
                          + "(\(subject)); use the key the certificate was issued for")
    }
}

/// "EC key on secp384r1", "RSA key"…: the type (and curve) of a key, for messages.
func describeKey(_ key: OpaquePointer) -> (isEC: Bool, curve: String?, text: String) {
    let isEC = EVP_PKEY_get_base_id(key) == EVP_PKEY_EC
    guard isEC else {
        let name = EVP_PKEY_get0_type_name(key).map { String(cString: $0) } ?? "unknown"
        return (false, nil, "\(name) key")
    }
    var buffer = [CChar](repeating: 0, count: 80)
    var length = 0
    let curve: String? = EVP_PKEY_get_group_name(key, &buffer, buffer.count, &length) == 1
        ? String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    return (true, curve, "EC key on \(curve ?? "an unknown curve")")
}

/// Passes a collection's bytes to `body` without copying when they are contiguous.
func withBytes<C: Collection<UInt8>, R>(_ bytes: C, _ body: (UnsafeRawBufferPointer) -> R) -> R {
    if let result = bytes.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) { return result }
    return Array(bytes).withUnsafeBytes(body)
}

/// An unencrypted signing key from PEM bytes; an encrypted one is refused with `why` (what the
/// algorithm's keys are: "ES256 keys must be unencrypted PEM, as Apple's .p8 files are").
func loadUnencryptedPrivateKey(_ bytes: [UInt8], source: String, why: String) throws(CryptoError) -> PKey {
    do {
        return try loadPrivateKey(bytes, source: source, passphrase: nil)
    } catch where error.kind == .wrongPassphrase {
        throw CryptoError(.invalidFormat("encrypted key"), "\(source) is an encrypted key; \(why)")
    }
}

/// The public half of `key` as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
func publicKeyPEM(of key: PKey, source: String) throws(CryptoError) -> String {
    guard let pem = memoryBIOOutput({ PEM_write_bio_PUBKEY($0, key.raw) == 1 }) else {
        throw CryptoError(.other("PEM_write_bio_PUBKEY"), "cannot export the public key of \(source)\(openSSLSuffix())")
    }
    return String(decoding: pem, as: UTF8.self)
}
