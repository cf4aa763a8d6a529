import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// A local stand-in for Google's OAuth token endpoint and the FCM HTTP v1 API, over real TLS
/// and HTTP/2 (``SimulatorHTTP2Server``), on loopback.
///
/// - `POST /token` takes the JWT-bearer grant (RFC 7523) and checks the assertion as Google does:
///   RS256 signature by a registered service account's key (`kid` = `private_key_id`), `iss`,
///   `aud` = this token URI, `scope` (firebase.messaging), `iat`/`exp` (at most an hour). It answers
///   `{"access_token","expires_in","token_type":"Bearer"}`.
/// - `POST /v1/projects/{p}/messages:send` checks the bearer access token, the project, the
///   message (``FCMMessageRules``), and answers `{"name":"projects/p/messages/…"}` or Google's
///   error JSON with its FcmError detail. `validate_only` is checked and answered, not delivered.
///
/// ```swift
/// let fcm = try FCMSimulator(configuration: .init(tls: .init(certificateFile: "server.pem", keyFile: "server.key")))
/// try fcm.start()
/// let account = try fcm.writeServiceAccount(to: "service-account.json")   // token_uri → this simulator
/// …                                 // point the fcm transport at fcm.baseURL with that file
/// fcm.received                      // what it accepted
/// fcm.stop()
/// ```
public final class FCMSimulator: Sendable {
    /// How the simulator runs.
    public struct Configuration: Sendable {
        public var host: String = "127.0.0.1"
        /// 0 picks a free port.
        public var port: Int = 0
        /// TLS certificate and key; `nil` serves cleartext h2c (debugging only).
        public var tls: SimulatorHTTP2Server.Configuration.TLS?
        /// The project accounts made by ``FCMSimulator/makeServiceAccount(clientEmail:register:)`` belong to.
        public var projectID: String = "herald-sim"
        /// Accounts whose assertions are accepted from the start.
        public var accounts: [FCMServiceAccount] = []
        /// Lifetime of the access tokens issued (Google's are an hour: `expires_in` 3599).
        public var accessTokenLifetime: TimeInterval = 3599
        /// Write `expires_in` as a string (`"3599"`), as some Google endpoints do, to test both forms.
        public var expiresInAsString = false
        public var faults = FCMFaults()
        /// Append every accepted send to this file as JSON Lines.
        public var recordFile: String?
        /// Keep accepted sends in memory for ``FCMSimulator/received`` (turn off for long runs).
        public var retainsMessages = true
        public var maxConcurrentStreams = 1000
        /// Issues and expires access tokens, and checks assertions' `iat`/`exp`.
        public var clock: any WallClock = SystemClock()
        public var logger: Logger = .disabled

        public init(tls: SimulatorHTTP2Server.Configuration.TLS?) { self.tls = tls }
    }

    public let configuration: Configuration
    private let core: FCMSimulatorCore
    private let server: SimulatorHTTP2Server

    /// Opens the record file and loads the TLS material; does not listen yet.
    /// - Throws: ``FCMSimulatorError`` naming the file or setting at fault.
    public init(configuration: Configuration) throws(FCMSimulatorError) {
        guard configuration.accessTokenLifetime >= 1 else {
            throw FCMSimulatorError("accessTokenLifetime must be at least 1 second, found \(configuration.accessTokenLifetime)")
        }
        self.configuration = configuration
        let core = try FCMSimulatorCore(configuration: configuration)
        self.core = core
        do {
            server = try SimulatorHTTP2Server(
                configuration: .init(host: configuration.host, port: configuration.port, tls: configuration.tls,
                                     maxConcurrentStreams: configuration.maxConcurrentStreams, threadName: "fcm-sim",
                                     logger: configuration.logger)) { request in core.handle(request) }
        } catch {
            throw FCMSimulatorError(error.description)
        }
    }

    deinit { stop() }

    /// Binds the port and starts serving.
    public func start() throws(FCMSimulatorError) {
        do { try server.start() } catch { throw FCMSimulatorError(error.description) }
        configuration.logger.info("FCM simulator listening", ["address": "\(configuration.host):\(port)"])
    }

    /// Stops serving and closes the record file.
    public func stop() {
        server.stop()
        core.close()
    }

    /// The bound port (0 before ``start()``).
    public var port: Int { server.port }

    /// `https://127.0.0.1:PORT`: the transport's `endpoint`.
    public var baseURL: String {
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        return "\(configuration.tls == nil ? "http" : "https")://\(host):\(port)"
    }

    /// The token endpoint (`token_uri`; also the assertions' `aud`).
    public var tokenURI: String { baseURL + FCMSimulatorCore.tokenPath }

    /// Accepts assertions signed by `account`'s key from now on.
    public func register(_ account: FCMServiceAccount) { core.register(account) }

    /// A new service account of ``Configuration/projectID`` whose `token_uri` is this simulator
    /// (call after ``start()``), registered unless `register` is false (an account Google does
    /// not know: its assertions get `invalid_grant`).
    public func makeServiceAccount(clientEmail: String? = nil, register: Bool = true,
                                   key: RS256SigningKey? = nil) throws(FCMSimulatorError) -> (account: FCMServiceAccount, json: String) {
        let made: (account: FCMServiceAccount, json: String)
        do {
            made = try FCMServiceAccount.generate(projectID: configuration.projectID, clientEmail: clientEmail, tokenURI: tokenURI, key: key)
        } catch {
            throw FCMSimulatorError("cannot make an RSA key: \(error.message)")
        }
        if register { core.register(made.account) }
        return made
    }

    /// Writes a new registered service account to `path` (mode 0600) and returns it.
    @discardableResult
    public func writeServiceAccount(to path: String, register: Bool = true, key: RS256SigningKey? = nil) throws(FCMSimulatorError) -> FCMServiceAccount {
        let made = try makeServiceAccount(register: register, key: key)
        do {
            try Data(made.json.utf8).write(to: URL(fileURLWithPath: path))
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        } catch {
            throw FCMSimulatorError("cannot write the service account to \"\(path)\": \(error)")
        }
        return made.account
    }

    /// Every accepted send so far, in arrival order (when ``Configuration/retainsMessages``).
    public var received: [FCMReceivedMessage] { core.received }

    /// Forgets the accepted sends kept in memory.
    public func clearReceived() { core.clearReceived() }

    /// Waits (up to `timeout` seconds) until at least `count` sends were accepted.
    public func waitForMessages(count: Int, timeout: TimeInterval = 30) async -> [FCMReceivedMessage]? {
        await SimulatorWait.value(timeout: timeout, every: 2_000_000) {
            let r = received
            return r.count >= count ? r : nil
        }
    }

    public var counters: FCMSimulatorCounters { core.counters.withLock { $0 } }

    /// The faults in force (with the counted ones still to come).
    public var faults: FCMFaults { core.faults.withLock { $0 } }

    /// Replaces the faults; takes effect on the next request.
    public func setFaults(_ faults: FCMFaults) { core.faults.withLock { $0 = faults } }

    /// Changes the faults in place.
    public func updateFaults(_ body: (inout FCMFaults) -> Void) { core.faults.withLock { body(&$0) } }

    /// One line for logs and the CLI's exit summary.
    public var summary: String { "fcm simulator: " + counters.summary }
}
