import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

extension APNsHTTP2Simulator {
    /// How providers authenticate, as on Apple's servers.
    public enum Authentication: Sendable {
        /// Provider tokens (JWT, ES256) checked against these public keys.
        case token(keys: [TokenKey])
        /// Client certificates (mutual TLS) checked against `TLS.clientCAFile`.
        case certificate
    }

    /// A team's token-auth key: what Apple holds for an uploaded `.p8` key.
    public struct TokenKey: Sendable {
        /// The 10-character key id (`kid`).
        public var keyID: String
        /// The team (`iss`) the key belongs to.
        public var teamID: String
        /// The public key as PEM (`-----BEGIN PUBLIC KEY-----`), a file path.
        public var publicKeyFile: String

        /// A key: its id, its team, and its public key file.
        public init(keyID: String, teamID: String, publicKeyFile: String) {
            self.keyID = keyID
            self.teamID = teamID
            self.publicKeyFile = publicKeyFile
        }
    }

    /// TLS material for the listener.
    public struct TLS: Sendable {
        /// Server certificate chain (PEM).
        public var certificateFile: String
        /// Server private key (PEM).
        public var keyFile: String
        /// CA (PEM) that client certificates must chain to; required for ``Authentication/certificate``.
        public var clientCAFile: String?

        /// Server identity, and the client CA for certificate authentication.
        public init(certificateFile: String, keyFile: String, clientCAFile: String? = nil) {
            self.certificateFile = certificateFile
            self.keyFile = keyFile
            self.clientCAFile = clientCAFile
        }
    }

    /// Apple's two environments; they differ in the `apns-unique-id` response header.
    public enum Environment: String, Sendable {
        /// Development: successful responses carry `apns-unique-id`.
        case sandbox
        case production
    }

    /// Everything the HTTP/2 simulator needs; defaults mirror Apple's servers.
    public struct Configuration: Sendable {
        /// Address to listen on (default loopback).
        public var host = "127.0.0.1"
        /// Port; 0 picks a free one (read it back from ``APNsHTTP2Simulator/port``).
        public var port = 0
        /// TLS with ALPN `h2`. `nil` serves cleartext HTTP/2 with prior knowledge (h2c), for debugging only.
        public var tls: TLS?
        /// Token or certificate authentication.
        public var authentication: Authentication
        /// Bundle ids (and MDM topics) providers may push to; the push-type suffixes are added
        /// per Apple's rules. Empty: any bundle with token auth; the client certificate's topics
        /// (Apple's topics extension, else its subject UID) with certificate auth.
        public var topics: [String] = []
        /// Sandbox (default) or production.
        public var environment: Environment = .sandbox
        /// `SETTINGS_MAX_CONCURRENT_STREAMS` (default 1000).
        public var maxConcurrentStreams = 1000
        /// With token auth, announce one concurrent stream until a request carries a valid token,
        /// then ``maxConcurrentStreams`` (Apple's behaviour; default on).
        public var singleStreamUntilAuthenticated = true
        /// Shortest time between two new tokens on one connection (Apple: 20 minutes).
        public var tokenUpdateInterval: TimeInterval = 1200
        /// Oldest `iat` accepted (Apple: one hour).
        public var tokenMaxAge: TimeInterval = 3600
        /// Faults to show from the start (change them later with ``APNsHTTP2Simulator/setFaults(_:)``).
        public var faults = HTTP2Faults()
        /// A JSON Lines file receiving every accepted notification (appended).
        public var recordFile: String?
        /// Keep accepted notifications in memory for ``APNsHTTP2Simulator/received`` (default on;
        /// turn off for long benchmarks).
        public var retainsNotifications = true
        /// The channel management API (iOS 18 broadcast channels) on a second port: `nil` (default)
        /// serves none, 0 picks a free port (read it back from ``APNsHTTP2Simulator/managementPort``).
        /// Apple's hosts are `api-manage-broadcast(.sandbox).push.apple.com` on 2196 (production)
        /// and 2195 (sandbox).
        public var managementPort: Int? = nil
        /// Channels allowed per bundle in this environment (Apple: 10,000).
        public var channelLimit = 10_000
        /// Time for JWT checks and records.
        public var clock: any WallClock = SystemClock()
        /// Where connection-level events go (TLS failures, protocol errors).
        public var logger: Logger = .disabled

        /// Apple's defaults for everything else.
        public init(tls: TLS?, authentication: Authentication) {
            self.tls = tls
            self.authentication = authentication
        }
    }
}
