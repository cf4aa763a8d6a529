import FoundationEssentials
import HeraldCore
import HeraldHTTP2

/// Google's OAuth token endpoint (`token_uri`) over HTTPS, through the shared HTTP/2 client.
final class FCMHTTPTokenEndpoint: FCMTokenEndpoint {
    private let client: HTTP2Client
    private let uri: FCMOrigin

    /// - Throws: the client's error when TLS (the CA file) or the proxy cannot be used.
    init(uri: FCMOrigin, configuration: FCMConfiguration, transport: String, context: TransportContext) throws(HTTP2ClientError) {
        self.uri = uri
        var c = configuration.clientConfiguration(for: uri, connections: 1)
        c.maxConcurrentStreams = 4
        client = try HTTP2Client(configuration: c, name: "\(transport)-oauth", logger: context.logger, metrics: context.metrics)
        try client.start()
    }

    func exchange(assertion: String) async -> FCMTokenGrant {
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        let request = HTTP2Request(method: "POST", path: uri.path,
                                   headers: [HTTP2Header("content-type", "application/x-www-form-urlencoded"),
                                             HTTP2Header("accept", "application/json")],
                                   body: HTTP2Body(Array(form.utf8)))
        guard let result = await client.send([request]).first else { return .temporary("no result", retryAfter: nil) }
        return Self.grant(result)
    }

    func stop() async { await client.stop(deadline: 2) }

    /// Reads the endpoint's answer (pure).
    static func grant(_ result: HTTP2Result) -> FCMTokenGrant {
        switch result {
        case .noAnswer(let reason): return .temporary("no answer from the token endpoint: \(reason)", retryAfter: nil)
        case .failed(let error):
            if case .invalidRequest = error { return .refused(error.description) }
            return .refused("cannot reach the token endpoint: \(error.description)")
        case .endedByHooks: return .temporary("ended by hooks", retryAfter: nil)
        case .answered(let response):
            let json = try? JSONValue.parse(response.body)
            if response.status == 200 {
                guard let token = json?["access_token"]?.stringValue, !token.isEmpty else {
                    return .temporary("the token endpoint answered 200 without access_token", retryAfter: nil)
                }
                // expires_in is a number, or a string of one.
                let lifetime = json?["expires_in"]?.doubleValue ?? json?["expires_in"]?.stringValue.flatMap(Double.init) ?? 3600
                guard lifetime > 0 else { return .temporary("the token endpoint answered expires_in \(lifetime)", retryAfter: nil) }
                return .token(Secret(token), expiresIn: lifetime)
            }
            let error = json?["error"]?.stringValue ?? "HTTP \(response.status)"
            let description = json?["error_description"]?.stringValue.map { ": " + FCMText.clip($0) } ?? ""
            if [408, 429, 500, 502, 503, 504].contains(response.status) {
                return .temporary("\(error) (\(response.status))\(description)", retryAfter: response.retryAfter)
            }
            return .refused("\(error) (\(response.status))\(description)")
        }
    }
}
