import FoundationEssentials
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `fcm` transport's configuration (its `transports.<name>` section).
///
/// ```json
/// "android": {"type": "fcm", "credentialsFile": "service-account.json"}
/// ```
/// The service account is read while the configuration is read, so `herald check` names a
/// missing field with its JSON path; a private key that cannot be loaded pauses the transport
/// instead (see ``FCMCredentials``).
public struct FCMConfiguration: TransportConfiguration {
    /// The service account (`credentialsFile`, a path or a `${ENV}` holding the JSON).
    public var credentials: FCMCredentials
    /// The project messages are sent for (`projectId`); default the service account's `project_id`.
    public var projectID: String
    /// Where `messages:send` goes (`endpoint`); default `https://fcm.googleapis.com`.
    public var endpoint: FCMOrigin = FCMOrigin(host: "fcm.googleapis.com")
    /// Extra CA file to trust for the endpoint and the token URI (simulators); TLS verification is always on.
    public var caFile: String?
    /// An HTTP CONNECT proxy for both (`http://user:password@host:port`).
    public var proxy: String?
    /// The HTTP/2 library (`engine`): `nghttp2` (default) or `curl`.
    public var engine: HTTP2Engine = .nghttp2
    /// HTTP/2 connections to the endpoint. Default 1.
    public var connections = 1
    /// Most streams in flight per connection (FCM's SETTINGS also apply). Default 100.
    public var maxConcurrentStreams = 100
    /// Deadline of each part of one attempt (see the HTTP/2 client). Default 10 s.
    public var timeout: TimeInterval = 10
    public var connectTimeout: TimeInterval = 10
    public var idleTimeout: TimeInterval = 300
    /// Transparent resends of a request that got no answer. Default 2.
    public var connectionRetries = 2
    /// Send with `validate_only`: FCM checks each message and answers without delivering it
    /// (`herald send --dry-run` sets it). Default false.
    public var validateOnly = false

    public var platform: Platform? { .android }
    /// Registrations with `"vendor": "fcm"` pick this route.
    public var vendor: String? { "fcm" }

    public var summary: String {
        var parts = ["project \(projectID) via \(endpoint)", credentials.description]
        if connections != 1 { parts.append("\(connections) connections") }
        if let proxy { parts.append("via proxy \(Self.redactedProxy(proxy))") }
        if validateOnly { parts.append("validate_only (nothing is delivered)") }
        parts.append("engine \(engine.rawValue)")
        return parts.joined(separator: ", ")
    }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        DeviceAddress(token: try FCMAddress.registrationToken(input))
    }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try FCMRenderer.render(content, context: context)
    }

    /// The proxy URL without credentials.
    static func redactedProxy(_ proxy: String) -> String {
        guard let at = proxy.lastIndex(of: "@"), let scheme = proxy.firstRange(of: "://") else { return proxy }
        return String(proxy[..<scheme.upperBound]) + "***@" + String(proxy[proxy.index(after: at)...])
    }

    init(credentials: FCMCredentials, projectID: String) {
        self.credentials = credentials
        self.projectID = projectID
    }

    /// Reads and validates the section; reads the service account.
    static func read(_ node: ConfigNode) -> FCMConfiguration? {
        let credentials = FCMCredentials.read(node)
        let project = node.string("projectId")
        if let project, !isProjectID(project) {
            node.error(at: "projectId", "expected a Firebase project id such as \"my-app-1a2b3\" (lower-case letters, digits, hyphens), found \"\(project)\"")
        }
        var endpoint: FCMOrigin? = nil
        if let text = node.string("endpoint") {
            if let parsed = FCMOrigin(url: text), parsed.path == "/" {
                endpoint = parsed
            } else {
                node.error(at: "endpoint", "expected https://host or https://host:port, such as \"https://fcm.googleapis.com\", found \"\(text)\"")
            }
        }
        let caFile = node.filePath("caFile")
        let proxy = node.string("proxy")
        if let proxy, !(proxy.hasPrefix("http://") || proxy.hasPrefix("https://")) {
            node.error(at: "proxy", "expected an http://host:port proxy URL")
        }
        let engine = node.oneOf("engine", HTTP2Engine.self)
        let connections = node.int("connections", in: 1...64)
        let streams = node.int("maxConcurrentStreams", in: 1...10_000)
        let timeout = node.duration("timeout", minimum: 0.01)
        let connectTimeout = node.duration("connectTimeout", minimum: 0.01)
        let idleTimeout = node.duration("idleTimeout", minimum: 1)
        let retries = node.int("connectionRetries", in: 0...10)
        let validateOnly = node.bool("validateOnly")
        guard let credentials else { return nil }
        if project == nil, !isProjectID(credentials.projectID) {
            node.error(at: "credentialsFile", "\(credentials.source): project_id \"\(credentials.projectID)\" is not a project id; set projectId")
            return nil
        }
        if let problem = credentials.keyProblem {
            node.warning(at: "credentialsFile", "\(problem); the transport stays paused until the key is fixed (then SIGHUP)")
        }
        var c = FCMConfiguration(credentials: credentials, projectID: project ?? credentials.projectID)
        if let endpoint { c.endpoint = endpoint }
        c.caFile = caFile
        c.proxy = proxy
        if let engine { c.engine = engine }
        if let connections { c.connections = connections }
        if let streams { c.maxConcurrentStreams = streams }
        if let timeout { c.timeout = timeout }
        if let connectTimeout { c.connectTimeout = connectTimeout }
        if let idleTimeout { c.idleTimeout = idleTimeout }
        if let retries { c.connectionRetries = retries }
        if let validateOnly { c.validateOnly = validateOnly }
        return c
    }

    /// Google's project id rule: 6–30 characters, lower-case letters, digits and hyphens, starting with a letter.
    static func isProjectID(_ s: String) -> Bool {
        guard (6...30).contains(s.count), let first = s.first, first.isASCII, first.isLowercase else { return false }
        return s.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "-") }
    }

    /// The HTTP/2 client settings for `origin`.
    func clientConfiguration(for origin: FCMOrigin, connections: Int) -> HTTP2ClientConfiguration {
        var c = HTTP2ClientConfiguration(host: origin.host, port: origin.port)
        c.caFile = caFile
        c.proxy = proxy
        c.engine = engine
        c.connections = connections
        c.maxConcurrentStreams = maxConcurrentStreams
        c.timeout = timeout
        c.connectTimeout = connectTimeout
        c.idleTimeout = idleTimeout
        c.connectionRetries = connectionRetries
        return c
    }
}

/// FCM registration tokens as device addresses.
enum FCMAddress {
    /// Shortest and longest token taken (Google's are about 150–200 bytes today).
    static let lengths = 32...1024

    /// A registration token: 32–1024 bytes of `[A-Za-z0-9_:-]`, kept as given (tokens are case-sensitive).
    static func registrationToken(_ input: DeviceAddressInput) throws(AddressProblem) -> String {
        guard case .token(let raw) = input else {
            throw AddressProblem(field: input.field, "an FCM route takes a registration token in \"token\", not a structured address")
        }
        let n = raw.utf8.count
        guard lengths.contains(n) else {
            throw AddressProblem(field: "token", "an FCM registration token is \(lengths.lowerBound)–\(lengths.upperBound) bytes, found \(n)")
        }
        for b in raw.utf8 where !isTokenByte(b) {
            throw AddressProblem(field: "token", "an FCM registration token has only letters, digits, \"_\", \":\" and \"-\" (found \(b < 0x20 || b >= 0x7F ? "byte 0x" + String(b, radix: 16) : "\"\(Character(Unicode.Scalar(b)))\""))")
        }
        return raw
    }

    static func isTokenByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x3A || b == 0x2D
    }
}
