/// The names (and help texts) of an ``HTTP2Client``'s metrics, all labelled `transport=<client name>`.
///
/// `herald_<prefix>_requests_in_flight`, `herald_<prefix>_connections`,
/// `herald_<prefix>_connection_failures_total`, `herald_<prefix>_requests_without_answer_total` and
/// `herald_<prefix>_responses_total{status}`; the apns-http2 transport keeps its `herald_apns_*` names.
public struct HTTP2MetricNames: Sendable {
    /// The part after `herald_`, such as `apns` or `fcm`.
    public var prefix: String
    /// The service's name in help texts, such as `APNs` or `FCM`.
    public var service: String

    /// Names `herald_<prefix>_…`, help texts about `service`.
    public init(prefix: String, service: String) {
        self.prefix = prefix
        self.service = service
    }

    /// `herald_http2_…`.
    public static let generic = HTTP2MetricNames(prefix: "http2", service: "HTTP/2")
}
