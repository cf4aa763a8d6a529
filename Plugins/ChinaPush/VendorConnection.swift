import FoundationEssentials
import HeraldCore
import HeraldHTTP2

/// An `https://host[:port]` origin with an optional path prefix.
public struct VendorOrigin: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The path prefix without a trailing slash (`""` for none).
    public var path: String

    public init(host: String, port: Int = 443, path: String = "") {
        self.host = host
        self.port = port
        self.path = path
    }

    /// Parses `https://host[:port][/path]`; `nil` for anything else.
    public init?(url: String) {
        guard url.hasPrefix("https://") else { return nil }
        let rest = url.dropFirst("https://".count)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        guard let (host, port) = HTTP2ClientConfiguration.hostAndPort(rest[..<slash], defaultPort: 443) else { return nil }
        var path = String(rest[slash...])
        while path.hasSuffix("/") { path.removeLast() }
        guard !path.contains("?"), !path.contains("#"), !path.contains(" ") else { return nil }
        self.init(host: host, port: port, path: path)
    }

    public var description: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return "https://\(h)\(port == 443 ? "" : ":\(port)")\(path)"
    }
}

/// How a vendor plugin reaches its vendor: the keys every `hms`, `xiaomi`, `oppo` and `vivo`
/// section shares (`endpoint`, `caFile`, `proxy`, `connections`, `timeout`, `connectTimeout`,
/// `idleTimeout`, `connectionRetries`).
///
/// Requests go through the shared HTTP client: its curl engine by default, HTTP/2 where the
/// vendor's TLS offers `h2` and HTTP/1.1 (several kept-alive connections) where it does not; or
/// its nghttp2 engine (`engine`), HTTP/2 only.
public struct VendorConnection: Sendable {
    /// Where the vendor's API is (`endpoint`).
    public var endpoint: VendorOrigin
    /// Extra CA file to trust (simulators); TLS verification is always on.
    public var caFile: String?
    /// An HTTP CONNECT proxy (`http://user:password@host:port`); never logged unredacted.
    public var proxy: String?
    /// Connection slots to the endpoint (each HTTP/2, or up to 8 HTTP/1.1 connections). Default 1.
    public var connections = 1
    /// Deadline of each part of one attempt. Default 10 s.
    public var timeout: TimeInterval = 10
    public var connectTimeout: TimeInterval = 10
    public var idleTimeout: TimeInterval = 300
    /// Transparent resends of a request that got no answer. Default 1.
    public var connectionRetries = 1
    /// The HTTP library (`engine`): `curl` (default: HTTP/2 where the vendor offers `h2`, else
    /// HTTP/1.1) or `nghttp2` (HTTP/2 only, the least CPU per request, for a vendor known to speak it).
    public var engine: HTTP2Engine = .curl

    public init(endpoint: VendorOrigin) { self.endpoint = endpoint }

    /// The keys this reads.
    public static let keys = ["endpoint", "caFile", "proxy", "connections", "timeout", "connectTimeout", "idleTimeout", "connectionRetries", "engine"]

    /// Reads the shared keys, with `defaultEndpoint` when `endpoint` is absent.
    public static func read(_ node: ConfigNode, defaultEndpoint: VendorOrigin, endpointKey: String = "endpoint") -> VendorConnection {
        var c = VendorConnection(endpoint: defaultEndpoint)
        if let text = node.string(endpointKey) {
            if let origin = VendorOrigin(url: text) { c.endpoint = origin } else {
                node.error(at: endpointKey, "expected https://host[:port][/path], such as \"\(defaultEndpoint)\", found \"\(text)\"")
            }
        }
        c.caFile = node.filePath("caFile")
        if let proxy = node.string("proxy") {
            if proxy.hasPrefix("http://") || proxy.hasPrefix("https://") { c.proxy = proxy } else {
                node.error(at: "proxy", "expected an http://host:port proxy URL")
            }
        }
        if let n = node.int("connections", in: 1...64) { c.connections = n }
        if let t = node.duration("timeout", minimum: 0.01) { c.timeout = t }
        if let t = node.duration("connectTimeout", minimum: 0.01) { c.connectTimeout = t }
        if let t = node.duration("idleTimeout", minimum: 1) { c.idleTimeout = t }
        if let n = node.int("connectionRetries", in: 0...10) { c.connectionRetries = n }
        if let e = node.oneOf("engine", HTTP2Engine.self) { c.engine = e }
        if let proxy = c.proxy, let problem = HTTP2ClientConfiguration.proxyProblem(proxy, engine: c.engine) {
            node.error(at: "proxy", problem)
        }
        return c
    }

    /// The same settings for another origin (HMS's token endpoint).
    public func with(endpoint: VendorOrigin) -> VendorConnection {
        var c = self
        c.endpoint = endpoint
        return c
    }

    /// A one-line description (no secrets: a proxy's credentials are redacted).
    public var summary: String {
        var s = "\(endpoint)"
        if connections != 1 { s += ", \(connections) connections" }
        if let proxy { s += ", via proxy \(HTTP2ClientConfiguration.redactedProxy(proxy))" }
        if engine != .curl { s += ", engine \(engine.rawValue)" }
        return s
    }

    /// The client settings.
    public var clientConfiguration: HTTP2ClientConfiguration {
        var c = HTTP2ClientConfiguration(host: endpoint.host, port: endpoint.port)
        c.caFile = caFile
        c.proxy = proxy
        c.engine = engine
        c.allowHTTP1 = engine == .curl
        c.connections = connections
        c.maxConcurrentStreams = 100
        c.timeout = timeout
        c.connectTimeout = connectTimeout
        c.idleTimeout = idleTimeout
        c.connectionRetries = connectionRetries
        return c
    }
}

/// One vendor origin's kept-alive connections (the shared HTTP client), with JSON and form helpers.
public final class VendorHTTP: Sendable {
    public let origin: VendorOrigin
    private let client: HTTP2Client

    /// - Throws: ``TransportError`` when the CA file or proxy cannot be used.
    public init(_ connection: VendorConnection, name: String, context: TransportContext) throws {
        origin = connection.endpoint
        do {
            client = try HTTP2Client(configuration: connection.clientConfiguration, name: name, logger: context.logger,
                                     metrics: context.metrics, clock: context.clock)
        } catch {
            throw TransportError(transport: name, message: error.description)
        }
    }

    public func start() throws(HTTP2ClientError) { try client.start() }

    public func stop(deadline: TimeInterval) async { await client.stop(deadline: deadline) }

    /// A POST of `body` to the origin's path prefix + `path`.
    public func request(_ path: String, headers: [HTTP2Header], body: [UInt8]) -> HTTP2Request {
        HTTP2Request(method: "POST", path: origin.path + path, headers: headers, body: HTTP2Body(body))
    }

    /// Sends `requests` together; one result per request, in order.
    public func send(_ requests: [HTTP2Request]) async -> [HTTP2Result] { await client.send(requests) }

    /// POSTs `body` to the origin's path prefix + `path`.
    public func post(_ path: String, headers: [HTTP2Header], body: [UInt8]) async -> HTTP2Result {
        await client.send([HTTP2Request(method: "POST", path: origin.path + path, headers: headers, body: HTTP2Body(body))]).first
            ?? .noAnswer(reason: "no result")
    }

    public static let formType = HTTP2Header("content-type", "application/x-www-form-urlencoded; charset=UTF-8")
    public static let jsonType = HTTP2Header("content-type", "application/json; charset=UTF-8")
}

/// A vendor's JSON answer, read leniently (vendors write numbers as strings and strings as numbers).
public struct VendorJSON: Sendable {
    public let value: JSONValue

    public init?(_ body: [UInt8]) {
        guard let v = try? JSONValue.parse(body), case .object = v else { return nil }
        value = v
    }

    public subscript(key: String) -> JSONValue? { value[key] }

    /// A member as an integer, written as a number or a string of one.
    public func int(_ key: String) -> Int? { Self.int(value[key]) }

    /// A member as a string (numbers written without a fraction).
    public func string(_ key: String) -> String? { Self.string(value[key]) }

    public static func int(_ v: JSONValue?) -> Int? {
        if let i = v?.intValue { return i }
        if let s = v?.stringValue { return Int(s) }
        return nil
    }

    public static func string(_ v: JSONValue?) -> String? {
        if let s = v?.stringValue { return s }
        if let i = v?.intValue { return String(i) }
        return nil
    }
}
