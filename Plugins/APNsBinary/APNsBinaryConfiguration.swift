import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto

/// The `apns-binary` transport's configuration (its `transports.<name>` section).
///
/// ```json
/// "legacy": {"type": "apns-binary", "environment": "production", "certFile": "apns.pem", "passphrase": "${APNS_PASS}"}
/// ```
/// The client certificate is loaded while the configuration is read, so `herald check` reports a
/// wrong passphrase or a key that does not match with the key's JSON path.
public struct APNsBinaryConfiguration: TransportConfiguration {
    /// `production` (gateway.push.apple.com:2195) or `sandbox` (gateway.sandbox.push.apple.com:2195). Required.
    public var apnsEnvironment: APNsEnvironment
    /// Where notifications go: `endpoint`, else Apple's gateway for the environment.
    public var endpoint: HostPort
    /// Where the feedback service is: `feedbackEndpoint`, else Apple's for the environment.
    public var feedbackEndpoint: HostPort
    /// Extra CA file to trust (simulators); TLS verification is always on.
    public var caFile: String?
    /// The client certificate and key (the binary API's only authentication).
    public var identity: ClientIdentity
    /// The file the certificate came from (for `herald check`).
    public var identitySource: String
    /// Connections kept open to the gateway, each streaming on its own thread. Default 1.
    public var connections: Int = 1
    /// Command 2 (`frame`, default), 1 (`enhanced`) or 0 (`simple`).
    public var format: APNsBinaryFormat = .frame
    /// Largest payload sent, in bytes; a larger one is rejected before anything is written.
    /// Default 2048 (256 for devices before iOS 8).
    public var maxPayload: Int = 2048
    /// How often the daemon reads the feedback service; `nil` (config 0) turns polling off. Default 1 h.
    public var feedbackInterval: TimeInterval? = 3600
    /// Least time between two proofs on one connection while notifications trickle in (each
    /// proof ends the connection, so this bounds the reconnects of a quiet connection); the
    /// first proof after a quiet spell is not held back. Default 5 s.
    public var proofInterval: TimeInterval = 5
    /// Deadline for connecting (TCP and TLS) and for a proof's answer. Default 10 s.
    public var timeout: TimeInterval = 10


    public var platform: Platform? { .ios }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        try APNsRoute.address(input, attributes: attributes, environment: apnsEnvironment)
    }

    public func canCarry(_ attributes: DeviceAttributes) -> Bool { APNsRoute.canCarry(attributes, environment: apnsEnvironment) }

    /// APNs' payload; a widget reload is refused: the binary interface has no push types.
    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        if content.widgets { throw ContentProblem(field: "widgets", "the binary interface cannot reload widgets (it has no push types): use an apns-http2 route") }
        return try APNsRoute.render(content, context: context)
    }

    public var summary: String {
        var parts = ["\(apnsEnvironment.rawValue) \(endpoint)", "format \(format.rawValue)",
                     "certificate \(identity.certificate.commonName ?? identity.certificate.subject)"]
        if connections != 1 { parts.append("\(connections) connections") }
        parts.append(feedbackInterval.map { "feedback \(feedbackEndpoint) every \(Int($0)) s" } ?? "feedback polling off")
        return parts.joined(separator: ", ")
    }

    /// `host:port` of a gateway or feedback service.
    public struct HostPort: Sendable, Equatable, CustomStringConvertible {
        /// A name or an IP literal (without brackets).
        public var host: String
        public var port: Int

        /// `host:port`.
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// Apple's gateway (port 2195) or feedback service (2196) for `environment`.
        public static func apple(_ environment: APNsEnvironment, feedback: Bool) -> HostPort {
            let sandbox = environment == .sandbox ? ".sandbox" : ""
            return feedback ? HostPort(host: "feedback\(sandbox).push.apple.com", port: 2196)
                : HostPort(host: "gateway\(sandbox).push.apple.com", port: 2195)
        }

        /// Parses `host:port` or `[v6]:port`.
        init?(_ text: String) {
            let t = Substring(text)
            guard let colon = t.lastIndex(of: ":"), let p = Int(t[t.index(after: colon)...]), (1...65535).contains(p) else { return nil }
            var h = t[..<colon]
            if h.hasPrefix("[") && h.hasSuffix("]") { h = h.dropFirst().dropLast() } else if h.contains(":") { return nil }
            guard !h.isEmpty, !h.contains("/") else { return nil }
            host = String(h)
            port = p
        }

        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
        var isLoopback: Bool { host == "localhost" || host == "::1" || host.hasPrefix("127.") }
    }

    /// Reads and validates the section; loads the certificate.
    static func read(_ node: ConfigNode) -> APNsBinaryConfiguration? {
        let environment = node.oneOf("environment", APNsEnvironment.self, required: true)
        let endpoint = hostPort(node, "endpoint", defaultPort: 2195)
        let feedbackEndpoint = hostPort(node, "feedbackEndpoint", defaultPort: 2196)
        let caFile = node.filePath("caFile")
        let connections = node.int("connections", in: 1...32)
        let format = node.oneOf("format", APNsBinaryFormat.self)
        let maxPayload = node.int("maxPayload", in: 1...65_535)
        if let maxPayload, maxPayload > 2048 {
            node.warning(at: "maxPayload", "APNs refused payloads over 2048 bytes (status 7, invalid payload size)")
        }
        let feedbackInterval = node.duration("feedbackInterval")
        let proofInterval = node.duration("proofInterval", minimum: 0)
        let timeout = node.duration("timeout", minimum: 0.01)
        if !node.has("certFile") && !node.has("p12File") {
            node.error("no certificate: give certFile (a PEM with the key, or with keyFile) or p12File")
        }
        let identity = node.has("certFile") || node.has("p12File") ? ClientIdentity.read(node) : nil
        guard let environment, let (identity, source) = identity else { return nil }
        if node.has("endpoint") && endpoint == nil || node.has("feedbackEndpoint") && feedbackEndpoint == nil { return nil }
        var c = APNsBinaryConfiguration(apnsEnvironment: environment,
                                        endpoint: endpoint ?? .apple(environment, feedback: false),
                                        feedbackEndpoint: feedbackEndpoint ?? .apple(environment, feedback: true),
                                        caFile: caFile, identity: identity, identitySource: source)
        if let connections { c.connections = connections }
        if let format { c.format = format }
        if let maxPayload { c.maxPayload = maxPayload }
        if let feedbackInterval { c.feedbackInterval = feedbackInterval > 0 ? feedbackInterval : nil }
        if let proofInterval { c.proofInterval = proofInterval }
        if let timeout { c.timeout = timeout }
        if let warning = c.retiredByApple(node) { node.warning(warning) }
        return c
    }

    /// Apple's hosts for the binary API, which Apple switched off for providers on 31 March 2021.
    static let appleHosts: Set<String> = ["gateway.push.apple.com", "gateway.sandbox.push.apple.com",
                                          "feedback.push.apple.com", "feedback.sandbox.push.apple.com"]

    /// A warning when this transport's gateway is Apple's (the default): Apple switched the legacy binary provider API off on 31 March 2021. It gives
    /// the equivalent `apns-http2` section with the same certificate (certificate auth works on
    /// HTTP/2), ready to paste; a passphrase is never printed.
    func retiredByApple(_ node: ConfigNode) -> String? {
        guard Self.appleHosts.contains(endpoint.host.lowercased()) else { return nil }
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.string("type", "apns-http2")
            o.string("environment", apnsEnvironment.rawValue)
            // As written in the section (relative paths stay relative to the config's folder).
            for key in ["p12File", "certFile", "keyFile"] { o.string(key, node.value[key]?.stringValue) }
            if node.has("passphrase") { o.string("passphrase", "<your passphrase, as in \(node.path).passphrase>") }
        }
        let name = node.path.hasPrefix("transports.") ? String(node.path.dropFirst("transports.".count)) : node.path
        return "Apple switched off the legacy binary provider API on 31 March 2021: \(endpoint) and \(feedbackEndpoint) "
            + "no longer accept providers, so this transport cannot deliver to Apple (apns-binary is for gateways that still "
            + "speak the protocol). Certificate auth works on HTTP/2; the equivalent section, with the same certificate, is: "
            + "\"\(name)\": \(w.string)"
    }

    private static func hostPort(_ node: ConfigNode, _ key: String, defaultPort: Int) -> HostPort? {
        guard let text = node.string(key) else { return nil }
        guard let parsed = HostPort(text) else {
            node.error(at: key, "expected host:port, such as \"gateway.push.apple.com:\(defaultPort)\" or \"127.0.0.1:\(defaultPort)\", found \"\(text)\"")
            return nil
        }
        if !parsed.isLoopback && parsed.port != defaultPort {
            node.warning(at: key, "Apple's service listens on port \(defaultPort), not \(parsed.port)")
        }
        return parsed
    }
}
