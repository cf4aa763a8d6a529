import FoundationEssentials
import HeraldCore

/// Which vendor a ``ChinaVendorSimulator`` stands in for.
public enum ChinaVendor: String, Sendable, CaseIterable {
    /// Huawei Push Kit: OAuth client credentials, `POST /v1/{appId}/messages:send`.
    case hms
    /// Xiaomi: `Authorization: key=<appSecret>`, form `POST /v3/message/regid`.
    case xiaomi
    /// OPPO: `POST /server/v1/auth` (SHA-256 sign), `unicast` and `unicast_batch`.
    case oppo
    /// vivo: `POST /message/auth` (MD5 sign), `/message/send`, `saveListPayload` + `pushToList`.
    case vivo
}

/// The app credentials a ``ChinaVendorSimulator`` accepts (each vendor reads the ones it has).
public struct ChinaVendorCredentials: Sendable, Equatable {
    /// HMS and vivo `appId`.
    public var appID = "10086000"
    /// HMS, Xiaomi and vivo `appSecret`.
    public var appSecret = "sim-app-secret"
    /// OPPO and vivo `appKey`.
    public var appKey = "sim-app-key"
    /// OPPO `masterSecret`.
    public var masterSecret = "sim-master-secret"
    /// Xiaomi `restricted_package_name` (and the app's package).
    public var packageName = "com.example.app"

    public init() {}
}

/// How a ``ChinaVendorSimulator`` misbehaves on purpose.
///
/// Counted faults apply to the next N sends that pass every check, in this order: ``expiredAccessTokens``
/// (before the token is even looked up), ``rateLimited``, ``dailyQuota``, ``serverErrors``. Token faults
/// apply to every send naming the token. ``badCredentials`` refuses the credentials at the auth endpoint
/// (and Xiaomi's key on every send).
public struct ChinaVendorFaults: Sendable, Equatable {
    /// Device tokens the vendor reports invalid (in its batch answer, or as its single-device code).
    public var invalidTokens: Set<String> = []
    /// The next N sends are answered as if their access token expired (HMS 80200003, OPPO 11, vivo 10000).
    public var expiredAccessTokens = 0
    /// The credentials are refused (HMS OAuth error, Xiaomi 21301, OPPO 14, vivo 10206).
    public var badCredentials = false
    /// The next N valid sends are rate limited (HMS 503, Xiaomi 10027, OPPO -2, vivo 10070's rate form).
    public var rateLimited = 0
    /// The next N valid sends find the daily quota used up (Xiaomi 200001, OPPO 33, vivo 10252).
    public var dailyQuota = 0
    /// The next N valid sends get HTTP 500.
    public var serverErrors = 0
    /// Seconds to hold back every answer of the send endpoints.
    public var latency: Double = 0

    public init() {}
}

/// What a ``ChinaVendorSimulator`` counted.
public struct ChinaVendorCounters: Sendable, Equatable {
    public var accessTokensIssued = 0
    public var authRefusals = 0
    /// Requests to a send endpoint.
    public var sends = 0
    /// Devices in accepted sends.
    public var devicesAccepted = 0
    /// Sends refused for a field, a length or a size.
    public var invalidRequests = 0

    public var summary: String {
        "\(sends) sends, \(devicesAccepted) devices accepted, \(invalidRequests) refused as invalid, \(accessTokensIssued) access tokens issued, \(authRefusals) auth refusals"
    }
}

/// One accepted send: the devices and what the vendor would show them.
public struct ChinaVendorReceived: Sendable, Equatable {
    /// The endpoint's path.
    public var path: String
    /// The devices it named.
    public var tokens: [String]
    /// The message as the vendor reads it: HMS's `message`, OPPO's `notification`, vivo's JSON
    /// body, Xiaomi's form fields as an object.
    public var message: JSONValue
    /// The id the simulator answered (message id, request id, task id).
    public var id: String

    /// One JSON line for the record file.
    var jsonLine: String {
        JSONValue.object(["path": .string(path), "tokens": .array(tokens.map(JSONValue.string)), "message": message, "id": .string(id)]).jsonString
    }
}

/// Why a ``ChinaVendorSimulator`` cannot start.
public struct ChinaVendorSimulatorError: Error, CustomStringConvertible, Sendable, Equatable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A local stand-in for Huawei Push Kit, Xiaomi, OPPO or vivo push, over real TLS (``SimulatorHTTP2Server``).
///
/// It checks what its vendor checks (signatures and timestamps, access tokens, required fields,
/// lengths, batch sizes, the package name), answers with the vendor's JSON and codes, applies
/// ``ChinaVendorFaults``, and records what it accepted.
///
/// ```swift
/// let sim = try ChinaVendorSimulator(configuration: .init(vendor: .hms, tls: tls))
/// try sim.start()      // sim.baseURL: the plugin's endpoint (and HMS's authEndpoint: sim.authURL)
/// sim.received         // what it accepted
/// sim.stop()
/// ```
public final class ChinaVendorSimulator: Sendable {
    public struct Configuration: Sendable {
        public var vendor: ChinaVendor
        public var host = "127.0.0.1"
        /// 0 picks a free port.
        public var port = 0
        /// TLS certificate and key; `nil` serves cleartext h2c (debugging only).
        public var tls: SimulatorHTTP2Server.Configuration.TLS?
        public var credentials = ChinaVendorCredentials()
        /// Lifetime of the access tokens issued (HMS 3600 s; OPPO and vivo 24 h).
        public var accessTokenLifetime: TimeInterval?
        /// How far a signed request's timestamp may be from the simulator's clock (OPPO, vivo). Default 10 min.
        public var timestampTolerance: TimeInterval = 600
        public var faults = ChinaVendorFaults()
        /// Append every accepted send to this file as JSON Lines.
        public var recordFile: String?
        /// Keep accepted sends in memory for ``ChinaVendorSimulator/received`` (off for long runs).
        public var retainsMessages = true
        public var clock: any WallClock = SystemClock()
        public var logger: Logger = .disabled

        public init(vendor: ChinaVendor, tls: SimulatorHTTP2Server.Configuration.TLS?) {
            self.vendor = vendor
            self.tls = tls
        }

        /// The lifetime in force: the configured one, else the vendor's own.
        var tokenLifetime: TimeInterval { accessTokenLifetime ?? (vendor == .hms ? 3600 : 86_400) }
    }

    public let configuration: Configuration
    let core: ChinaVendorSimulatorCore
    private let server: SimulatorHTTP2Server

    /// Opens the record file and loads the TLS material; does not listen yet.
    public init(configuration: Configuration) throws(ChinaVendorSimulatorError) {
        self.configuration = configuration
        let core = try ChinaVendorSimulatorCore(configuration: configuration)
        self.core = core
        do {
            server = try SimulatorHTTP2Server(
                configuration: .init(host: configuration.host, port: configuration.port, tls: configuration.tls,
                                     threadName: "\(configuration.vendor.rawValue)-sim", logger: configuration.logger)) { request in
                core.handle(request)
            }
        } catch {
            throw ChinaVendorSimulatorError(error.description)
        }
    }

    deinit { stop() }

    public func start() throws(ChinaVendorSimulatorError) {
        do { try server.start() } catch { throw ChinaVendorSimulatorError(error.description) }
        configuration.logger.info("\(configuration.vendor.rawValue) simulator listening", ["address": "\(configuration.host):\(port)"])
    }

    public func stop() {
        server.stop()
        core.close()
    }

    public var port: Int { server.port }

    /// `https://127.0.0.1:PORT`: the plugin's `endpoint`.
    public var baseURL: String {
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        return "\(configuration.tls == nil ? "http" : "https")://\(host):\(port)"
    }

    /// HMS's token endpoint on this simulator: the `hms` plugin's `authEndpoint`.
    public var authURL: String { baseURL + ChinaVendorSimulatorCore.hmsTokenPath }

    public var received: [ChinaVendorReceived] { core.messages.withLock { $0 } }

    public func clearReceived() { core.messages.withLock { $0.removeAll() } }

    /// Waits (up to `timeout` seconds) until sends naming at least `devices` devices were accepted.
    public func waitForDevices(_ devices: Int, timeout: TimeInterval = 30) async -> [ChinaVendorReceived]? {
        await SimulatorWait.value(timeout: timeout, every: 2_000_000) {
            let r = received
            return r.reduce(0) { $0 + $1.tokens.count } >= devices ? r : nil
        }
    }

    public var counters: ChinaVendorCounters { core.counters.withLock { $0 } }

    public var faults: ChinaVendorFaults { core.faults.withLock { $0 } }

    public func setFaults(_ faults: ChinaVendorFaults) { core.faults.withLock { $0 = faults } }

    public func updateFaults(_ body: (inout ChinaVendorFaults) -> Void) { core.faults.withLock { body(&$0) } }

    /// Forgets every access token issued (as if the vendor expired them all).
    public func revokeAccessTokens() { core.tokens.withLock { $0.removeAll() } }

    public var summary: String { "\(configuration.vendor.rawValue) simulator: " + counters.summary }
}
