import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `apns-http2` transport's configuration (its `transports.<name>` section).
///
/// ```json
/// "apns": {"type": "apns-http2", "environment": "production",
///          "keyFile": "AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}
/// ```
/// Credentials are loaded while the configuration is read, so `herald check` reports a wrong
/// passphrase or a key that is not P-256 with the key's JSON path.
public struct APNsHTTP2Configuration: TransportConfiguration {
    /// How Herald proves itself to APNs.
    public enum Authentication: Sendable {
        /// Token auth: an ES256 JWT from a `.p8` key (`keyFile`, `keyId`, `teamId`).
        case token(key: ES256SigningKey, keyID: String, teamID: String, keyFile: String)
        /// Certificate auth: mutual TLS with a client certificate and key.
        case certificate(ClientIdentity, source: String)
    }

    /// The HTTP/2 client under the transport (`engine`).
    public enum Engine: String, Sendable, CaseIterable {
        /// libcurl (the default): the most tried client, and the one for unusual proxies and networks.
        case curl
        /// libnghttp2 on OpenSSL, with Herald's own event loop: more notifications per second per CPU.
        case nghttp2
    }

    /// The HTTP/2 client: ``Engine/curl`` (default) or ``Engine/nghttp2``. Both follow the same
    /// rules (streams, resends, deadlines, tokens); they differ in cost.
    public var engine: Engine = .curl
    /// `production` (api.push.apple.com) or `sandbox` (api.sandbox.push.apple.com). Required.
    public var apnsEnvironment: APNsEnvironment
    /// Scheme, host and port requests go to; from `endpoint`, else Apple's host for the environment on 443.
    public var endpoint: Endpoint
    /// Where channel management requests (iOS 18 broadcast channels) go; from `managementEndpoint`,
    /// else Apple's: `api-manage-broadcast.push.apple.com:2196` (production) or
    /// `api-manage-broadcast.sandbox.push.apple.com:2195` (sandbox).
    public var managementEndpoint: Endpoint
    /// Extra CA file to trust (simulators); TLS verification is always on.
    public var caFile: String?
    public var authentication: Authentication
    /// `apns-topic` to use instead of the app's (`topic`); the push type's suffix is still appended.
    public var topic: String?
    /// HTTP/2 connections (each on its own thread with its own engine). Default 1.
    public var connections: Int = 1
    /// Most streams in flight per connection (the server's SETTINGS_MAX_CONCURRENT_STREAMS also
    /// applies). Default 500.
    public var maxConcurrentStreams: Int = 500
    /// Deadline of each part of one attempt: waiting for a free stream, then in flight (connection
    /// set-up included). With resends a request takes at most 2 × `timeout` × (1 + ``connectionRetries``)
    /// before its outcome (one more 2 × `timeout` after 403 ExpiredProviderToken). Default 10 s.
    public var timeout: TimeInterval = 10
    /// Deadline of a connection attempt. Default 10 s.
    public var connectTimeout: TimeInterval = 10
    /// Idle connections are closed after this (a silently dead connection is never reused). Default 5 min.
    public var idleTimeout: TimeInterval = 300
    /// An HTTP CONNECT proxy such as `http://proxy.internal:3128` (credentials as `http://user:password@host:port`).
    public var proxy: String?
    /// Transparent retries of a request that failed without an answer (taken back from a dropped
    /// connection or after GOAWAY, a reset stream, an attempt past ``timeout``), before the
    /// dispatcher's backoff takes over. Default 2.
    public var connectionRetries: Int = 2


    public var platform: Platform? { .ios }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        try APNsRoute.address(input, attributes: attributes, environment: apnsEnvironment)
    }

    public func canCarry(_ attributes: DeviceAttributes) -> Bool { APNsRoute.canCarry(attributes, environment: apnsEnvironment) }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try APNsRoute.render(content, context: context)
    }

    public var summary: String {
        var parts = ["\(apnsEnvironment.rawValue) \(endpoint)"]
        switch authentication {
        case .token(_, let keyID, let teamID, _): parts.append("token auth key \(keyID) team \(teamID)")
        case .certificate(let identity, _): parts.append("certificate auth \(identity.certificate.commonName ?? identity.certificate.subject)")
        }
        if connections != 1 { parts.append("\(connections) connections") }
        if let proxy { parts.append("via proxy \(Self.redactedProxy(proxy))") }
        parts.append("engine \(engine.rawValue)")
        return parts.joined(separator: ", ")
    }

    /// The proxy URL without credentials.
    static func redactedProxy(_ proxy: String) -> String { HTTP2ClientConfiguration.redactedProxy(proxy) }

    /// The channel management client's configuration: one connection to ``managementEndpoint``,
    /// otherwise as the provider client.
    var managementClientConfiguration: HTTP2ClientConfiguration {
        var c = clientConfiguration
        c.host = managementEndpoint.host
        c.port = managementEndpoint.port
        c.connections = 1
        c.maxConcurrentStreams = min(maxConcurrentStreams, 100)
        return c
    }

    /// The shared HTTP/2 client's configuration for this transport.
    var clientConfiguration: HTTP2ClientConfiguration {
        var c = HTTP2ClientConfiguration(host: endpoint.host, port: endpoint.port)
        c.caFile = caFile
        if case .certificate(let identity, _) = authentication { c.clientIdentity = identity }
        c.proxy = proxy
        c.engine = engine == .curl ? .curl : .nghttp2
        c.connections = connections
        c.maxConcurrentStreams = maxConcurrentStreams
        c.timeout = timeout
        c.connectTimeout = connectTimeout
        c.idleTimeout = idleTimeout
        c.connectionRetries = connectionRetries
        // APNs allows one stream on a new connection until a request succeeds (token auth); with
        // a certificate, sending more first would only churn connections as well.
        c.singleStreamUntilFirstAnswer = true
        return c
    }

    /// Where requests go.
    public struct Endpoint: Sendable, Equatable, CustomStringConvertible {
        public var host: String
        public var port: Int

        /// Apple's production and sandbox hosts.
        public static func apple(_ environment: APNsEnvironment, port: Int = 443) -> Endpoint {
            Endpoint(host: environment == .production ? "api.push.apple.com" : "api.sandbox.push.apple.com", port: port)
        }

        /// Apple's channel management hosts (broadcast channels, iOS 18).
        public static func appleManagement(_ environment: APNsEnvironment) -> Endpoint {
            environment == .production ? Endpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
                : Endpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
        }

        /// `https://host:port` for URLs (IPv6 literals bracketed).
        public var baseURL: String { "https://\(host.contains(":") ? "[\(host)]" : host):\(port)" }
        public var description: String { baseURL }
        var isLoopback: Bool { host == "localhost" || host == "::1" || host.hasPrefix("127.") }

        /// Parses `https://host:port`, `https://host` or `host:port`.
        init?(_ text: String) {
            var rest = Substring(text)
            if rest.hasPrefix("https://") { rest = rest.dropFirst(8) } else if rest.contains("://") { return nil }
            guard let (host, port) = Self.hostAndPort(rest, defaultPort: 443) else { return nil }
            self.host = host
            self.port = port
        }

        /// `host`, `host:port`, `[v6]` or `[v6]:port` (trailing slashes ignored), with a port in 1…65535.
        static func hostAndPort(_ text: Substring, defaultPort: Int) -> (String, Int)? {
            HTTP2ClientConfiguration.hostAndPort(text, defaultPort: defaultPort)
        }

        init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    /// Reads and validates the section; loads the key or certificate.
    static func read(_ node: ConfigNode) -> APNsHTTP2Configuration? {
        let environment = node.oneOf("environment", APNsEnvironment.self, required: true)
        var endpoint = environment.map { Endpoint.apple($0) }
        if let text = node.string("endpoint") {
            if let parsed = Endpoint(text) {
                endpoint = parsed
                if !parsed.isLoopback && ![443, 2197].contains(parsed.port) {
                    node.warning(at: "endpoint", "APNs listens on port 443 or 2197, not \(parsed.port)")
                }
            } else {
                node.error(at: "endpoint", "expected https://host:port, such as \"https://api.push.apple.com:443\" or \"https://127.0.0.1:2197\", found \"\(text)\"")
            }
        }
        var managementEndpoint = environment.map { Endpoint.appleManagement($0) }
        if let text = node.string("managementEndpoint") {
            if let parsed = Endpoint(text) {
                managementEndpoint = parsed
            } else {
                node.error(at: "managementEndpoint", "expected https://host:port, such as \"https://api-manage-broadcast.push.apple.com:2196\" or \"https://127.0.0.1:2195\", found \"\(text)\"")
            }
        }
        let caFile = node.filePath("caFile")
        let topic = node.string("topic")
        if let topic, let problem = FieldLimits.headerValueProblem(topic) {
            node.error(at: "topic", "\(problem): it is sent as the apns-topic header")
        }
        let connections = node.int("connections", in: 1...64)
        let streams = node.int("maxConcurrentStreams", in: 1...10_000)
        let timeout = node.duration("timeout", minimum: 0.01)
        let connectTimeout = node.duration("connectTimeout", minimum: 0.01)
        let idleTimeout = node.duration("idleTimeout", minimum: 1)
        let proxy = node.string("proxy")
        let retries = node.int("connectionRetries", in: 0...10)
        let engine = node.oneOf("engine", Engine.self)
        if let proxy, let problem = HTTP2ClientConfiguration.proxyProblem(proxy, engine: engine == .nghttp2 ? .nghttp2 : .curl) {
            node.error(at: "proxy", problem)
        }
        let authentication = readAuthentication(node)
        guard let environment, let endpoint, let managementEndpoint, let authentication else { return nil }
        var c = APNsHTTP2Configuration(apnsEnvironment: environment, endpoint: endpoint, managementEndpoint: managementEndpoint, caFile: caFile,
                                       authentication: authentication, topic: topic, proxy: proxy)
        if let connections { c.connections = connections }
        if let streams { c.maxConcurrentStreams = streams }
        if let timeout { c.timeout = timeout }
        if let connectTimeout { c.connectTimeout = connectTimeout }
        if let idleTimeout { c.idleTimeout = idleTimeout }
        if let retries { c.connectionRetries = retries }
        if let engine { c.engine = engine }
        return c
    }

    private static func readAuthentication(_ node: ConfigNode) -> Authentication? {
        let hasCertificate = node.has("certFile") || node.has("p12File")
        let hasToken = node.has("keyId") || node.has("teamId")
        if hasCertificate && hasToken {
            node.error("choose one kind of authentication: token (keyFile, keyId, teamId) or certificate (certFile/p12File)")
            return nil
        }
        if hasCertificate {
            return ClientIdentity.read(node).map { .certificate($0.identity, source: $0.source) }
        }
        if !node.has("keyFile") && !hasToken {
            node.error("no credentials: give keyFile, keyId and teamId (token auth), or certFile/p12File (certificate auth)")
            return nil
        }
        let keyID = node.string("keyId", required: true)
        let teamID = node.string("teamId", required: true)
        if let keyID, !Self.isAppleID(keyID) { node.error(at: "keyId", "expected Apple's 10-character key id, such as \"ABC123DEFG\", found \"\(keyID)\"") }
        if let teamID, !Self.isAppleID(teamID) { node.error(at: "teamId", "expected Apple's 10-character team id, such as \"DEF123GHIJ\", found \"\(teamID)\"") }
        guard let keyFile = node.filePath("keyFile", required: true) else { return nil }
        if node.has("passphrase") { node.warning(at: "passphrase", "ignored: .p8 keys are not encrypted") }
        do {
            let key = try ES256SigningKey(pemFile: keyFile)
            guard let keyID, let teamID, isAppleID(keyID), isAppleID(teamID) else { return nil }
            return .token(key: key, keyID: keyID, teamID: teamID, keyFile: keyFile)
        } catch {
            node.error(at: "keyFile", error.message)
            return nil
        }
    }

    static func isAppleID(_ s: String) -> Bool {
        s.count == 10 && s.allSatisfy { $0.isASCII && ($0.isUppercase || $0.isNumber) }
    }
}
