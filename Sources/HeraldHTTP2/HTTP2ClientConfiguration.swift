import FoundationEssentials
import HeraldCrypto

/// Which library carries an ``HTTP2Client``'s requests.
public enum HTTP2Engine: String, Sendable, CaseIterable {
    /// libnghttp2 on OpenSSL with the client's own epoll loop: the least CPU per request (default).
    case nghttp2
    /// libcurl's multi interface: any proxy libcurl knows, and HTTP/1.1 when ``HTTP2ClientConfiguration/allowHTTP1`` is set.
    case curl
}

/// Where an ``HTTP2Client`` connects and how it uses its connections.
///
/// The origin is `https://host:port` (TLS verification always on), or `http://host:port` with ``plainText``.
public struct HTTP2ClientConfiguration: Sendable {
    /// The origin's host (a name, an IPv4 literal or an IPv6 literal without brackets); also the TLS server name.
    public var host: String
    /// The origin's port.
    public var port: Int
    /// A CA file to trust instead of the system's trust store (simulators, private CAs); `nil`: the system's.
    public var caFile: String?
    /// A client certificate and key for mutual TLS (APNs certificate auth); `nil`: none.
    public var clientIdentity: ClientIdentity?
    /// An HTTP CONNECT proxy, `http://[user:password@]host:port` (the curl engine also takes what libcurl takes).
    ///
    /// - Important: the URL may hold credentials; the client never logs it or puts it in an error unredacted.
    public var proxy: String?
    /// The library under the client. Default ``HTTP2Engine/nghttp2``.
    public var engine: HTTP2Engine = .nghttp2
    /// Curl engine only: speak HTTP/1.1 when the server's ALPN offers no `h2` (some Web Push
    /// services), with up to ``maxHTTP1Connections`` connections per ``connections``. Default `false`:
    /// a server without `h2` fails every request with ``HTTP2ClientError/noHTTP2(_:)``.
    public var allowHTTP1 = false
    /// Curl engine with ``allowHTTP1``: most HTTP/1.1 connections (each carries one request at a time) per connection slot. Default 8.
    public var maxHTTP1Connections = 8
    /// HTTP/2 connections, each on its own thread. Default 1.
    public var connections = 1
    /// Most streams in flight per connection; the server's SETTINGS_MAX_CONCURRENT_STREAMS also applies. Default 100.
    public var maxConcurrentStreams = 100
    /// Deadline of each part of one attempt: waiting for a free stream, then in flight (connection
    /// set-up included). An attempt lost with its connection goes again (``connectionRetries``) with
    /// a new deadline, so a request ends within 2 × `timeout` × (1 + `connectionRetries`) (plus one more
    /// 2 × `timeout` per resend a hook asks for). Default 10 s.
    public var timeout: TimeInterval = 10
    /// Deadline of a connection attempt (TCP, proxy, TLS). Default 10 s.
    public var connectTimeout: TimeInterval = 10
    /// A connection idle this long is closed; the next request opens a new one. Default 5 min.
    public var idleTimeout: TimeInterval = 300
    /// A connection that received nothing for this long is sent a PING (nghttp2 engine; libcurl
    /// probes on its own), and closed when the PING goes unanswered within ``timeout``. Default 60 s.
    public var pingInterval: TimeInterval = 60
    /// Resends of a request that got no answer because its connection was lost (GOAWAY above its
    /// stream, a drop, a reset stream, an attempt past ``timeout``). Default 2.
    public var connectionRetries = 2
    /// One stream on a new connection until it answers a request with a status other than 401
    /// or 403 (APNs token auth allows one stream until a request with a valid token succeeds). Default `false`.
    public var singleStreamUntilFirstAnswer = false

    /// Curl engine with ``allowHTTP1`` only: `http://` instead of `https://`, no TLS (a webhook
    /// receiver the operator names with an `http` URL). Default `false`.
    public var plainText = false

    /// An origin with defaults for everything else.
    public init(host: String, port: Int = 443) {
        self.host = host
        self.port = port
    }

    /// `host:port` (IPv6 literals bracketed), as `:authority` and CONNECT take it.
    public var authority: String { "\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    /// `https://host:port` (`http://` with ``plainText``).
    public var origin: String { "\(plainText ? "http" : "https")://\(authority)" }
}

extension HTTP2ClientConfiguration {
    /// `host`, `host:port`, `[v6]` or `[v6]:port` (trailing slashes ignored), with a port in 1…65535.
    public static func hostAndPort(_ text: Substring, defaultPort: Int) -> (String, Int)? {
        var rest = text
        while rest.hasSuffix("/") { rest = rest.dropLast() }
        let host: String, port: Int
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.isEmpty { port = defaultPort } else if after.hasPrefix(":"), let p = Int(after.dropFirst()) { port = p } else { return nil }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let p = Int(rest[rest.index(after: colon)...]) else { return nil }
            port = p
        } else {
            host = String(rest)
            port = defaultPort
        }
        guard !host.isEmpty, !host.contains("/"), (1...65535).contains(port) else { return nil }
        return (host, port)
    }

    /// A proxy URL without its credentials (`http://***@host:port`), for logs, errors and summaries.
    public static func redactedProxy(_ proxy: String) -> String {
        guard let at = proxy.lastIndex(of: "@"), let scheme = proxy.firstRange(of: "://") else { return proxy }
        return String(proxy[..<scheme.upperBound]) + "***@" + String(proxy[proxy.index(after: at)...])
    }

    /// Why `engine` cannot use `proxy` (for configuration checks), or `nil` when it can. libcurl
    /// takes any proxy URL it knows; the nghttp2 engine takes `http://[user:password@]host:port`.
    public static func proxyProblem(_ proxy: String, engine: HTTP2Engine) -> String? {
        guard engine == .nghttp2, ProxyTunnel(proxy, to: "") == nil else { return nil }
        return ProxyTunnel.unsupported(proxy)
    }
}
