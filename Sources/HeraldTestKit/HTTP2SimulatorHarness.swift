import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator

/// The APNs HTTP/2 simulator set up for a test: TLS with the shared test certificates, on
/// 127.0.0.1 port 0, with token or certificate authentication.
///
/// ```swift
/// let apns = try HTTP2SimulatorHarness.tokenAuth()
/// defer { apns.stop() }
/// // point a client at apns.baseURL, trusting apns.certificates.caFile, with try apns.jwt()
/// let arrived = await apns.simulator.waitForNotifications(count: 1)
/// ```
public final class HTTP2SimulatorHarness: Sendable {
    /// The running simulator (read `received`, `counters`; call `setFaults`).
    public let simulator: APNsHTTP2Simulator
    /// The shared test certificates: trust `caFile`; `authKey` signs tokens; `clientCertificate` for mTLS.
    public let certificates: TestCertificates

    private init(simulator: APNsHTTP2Simulator, certificates: TestCertificates) {
        self.simulator = simulator
        self.certificates = certificates
    }

    /// Token authentication with the test key (key id ``TestCertificates/authKeyID``, team
    /// ``TestCertificates/teamID``); any topic unless `configure` sets `topics`.
    public static func tokenAuth(faults: HTTP2Faults = HTTP2Faults(),
                                 configure: (inout APNsHTTP2Simulator.Configuration) -> Void = { _ in }) throws -> HTTP2SimulatorHarness {
        let certs = try TestCertificates.shared()
        var c = APNsHTTP2Simulator.Configuration(
            tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey),
            authentication: .token(keys: [.init(keyID: certs.authKeyID, teamID: certs.teamID, publicKeyFile: certs.authKeyPublic)]))
        c.faults = faults
        configure(&c)
        return try start(c, certs)
    }

    /// Certificate authentication: clients must present a certificate from the test CA (the
    /// test client certificate covers ``TestCertificates/topic`` and its `.voip`/`.complication` topics).
    public static func certificateAuth(faults: HTTP2Faults = HTTP2Faults(),
                                       configure: (inout APNsHTTP2Simulator.Configuration) -> Void = { _ in }) throws -> HTTP2SimulatorHarness {
        let certs = try TestCertificates.shared()
        var c = APNsHTTP2Simulator.Configuration(
            tls: .init(certificateFile: certs.serverCertificate, keyFile: certs.serverKey, clientCAFile: certs.caFile),
            authentication: .certificate)
        c.faults = faults
        configure(&c)
        return try start(c, certs)
    }

    private static func start(_ configuration: APNsHTTP2Simulator.Configuration, _ certs: TestCertificates) throws -> HTTP2SimulatorHarness {
        let simulator = try APNsHTTP2Simulator(configuration: configuration)
        try simulator.start()
        return HTTP2SimulatorHarness(simulator: simulator, certificates: certs)
    }

    /// The listening port on 127.0.0.1.
    public var port: Int { simulator.port }
    /// `https://127.0.0.1:PORT` (`http://` for an h2c simulator).
    public var baseURL: String { "\(simulator.configuration.tls == nil ? "http" : "https")://127.0.0.1:\(port)" }
    /// The URL APNs uses for `token`.
    public func url(token: String) -> String { "\(baseURL)/3/device/\(token)" }

    /// A provider token signed with the test key by the `openssl` command.
    public func jwt(issuedAt: Date = Date(), keyID: String? = nil, teamID: String? = nil) throws -> String {
        try TestJWT.make(keyFile: certificates.authKey, keyID: keyID ?? certificates.authKeyID,
                         teamID: teamID ?? certificates.teamID, issuedAt: issuedAt)
    }

    /// Stops the simulator (closes its connections and port).
    public func stop() { simulator.stop() }
}

/// Provider tokens made the way a user would with the `openssl` command line: the signing
/// input is signed with `openssl dgst -sha256 -sign KEY`, and the DER signature is converted to
/// JWS form (raw `R‖S`, base64url). Independent of HeraldCrypto, so tests check one against the other.
public enum TestJWT {
    /// A signed ES256 token with header `{"alg":"ES256","kid":…}` and claims `{"iss":…,"iat":…}`.
    /// - Parameters:
    ///   - header: a replacement JOSE header JSON (for tests of bad tokens).
    ///   - claims: replacement claims JSON.
    public static func make(keyFile: String, keyID: String, teamID: String, issuedAt: Date,
                            header: String? = nil, claims: String? = nil) throws -> String {
        let h = base64URL(Array((header ?? #"{"alg":"ES256","kid":"\#(keyID)"}"#).utf8))
        let c = base64URL(Array((claims ?? #"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#).utf8))
        let input = "\(h).\(c)"
        let dir = try TemporaryDirectory(prefix: "herald-jwt")
        defer { dir.remove() }
        let inputFile = try dir.write("input", input)
        let signatureFile = dir.file("signature.der")
        let result = try Run.blocking("/usr/bin/openssl", ["dgst", "-sha256", "-sign", keyFile, "-out", signatureFile, inputFile])
        guard result.status == 0 else { throw TestSetupError("openssl dgst -sign failed: \(result.stderr)") }
        let der = [UInt8](try Data(contentsOf: URL(fileURLWithPath: signatureFile)))
        guard let raw = rawSignature(fromDER: der) else { throw TestSetupError("openssl wrote an unexpected signature") }
        return "\(input).\(base64URL(raw))"
    }

    /// `SEQUENCE { INTEGER r, INTEGER s }` → 64 bytes `r ‖ s` (P-256).
    public static func rawSignature(fromDER der: [UInt8]) -> [UInt8]? {
        var i = 0
        func length() -> Int? {
            guard i < der.count else { return nil }
            let first = Int(der[i]); i += 1
            if first < 0x80 { return first }
            let n = first & 0x7F
            guard n <= 2, i + n <= der.count else { return nil }
            var value = 0
            for _ in 0..<n { value = value << 8 | Int(der[i]); i += 1 }
            return value
        }
        func integer() -> [UInt8]? {
            guard i < der.count, der[i] == 0x02 else { return nil }
            i += 1
            guard let n = length(), i + n <= der.count else { return nil }
            var bytes = Array(der[i..<(i + n)])
            i += n
            while bytes.count > 32, bytes.first == 0 { bytes.removeFirst() }
            guard bytes.count <= 32 else { return nil }
            return [UInt8](repeating: 0, count: 32 - bytes.count) + bytes
        }
        guard der.first == 0x30 else { return nil }
        i = 1
        guard length() != nil, let r = integer(), let s = integer() else { return nil }
        return r + s
    }

    /// Base64url without padding.
    public static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
