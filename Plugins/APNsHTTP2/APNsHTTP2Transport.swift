import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto
import HeraldHTTP2

/// The `apns-http2` transport: APNs' HTTP/2 provider API through the shared ``HTTP2Client``
/// (libnghttp2 or libcurl).
///
/// Token auth (ES256 JWT from a `.p8` key, one token shared by all connections, chosen as each
/// request starts: ``ProviderTokenHooks``) or certificate auth (mutual TLS). Each configured
/// connection is an engine of the client on its own thread multiplexing many streams: libcurl
/// (the default) or libnghttp2 (`"engine": "nghttp2"`). Apple's answers become outcomes through
/// ``ResponseMapping``; a payload over Apple's limit is rejected without a request.
public final class APNsHTTP2Transport: TransportPlugin {
    public typealias Configuration = APNsHTTP2Configuration
    public static let overrideBlocks = [APNsOptions.block]

    public static let kind = "apns-http2"

    public static func configuration(from node: ConfigNode) -> APNsHTTP2Configuration? {
        APNsHTTP2Configuration.read(node)
    }

    public let name: String
    private let configuration: APNsHTTP2Configuration
    private let logger: Logger
    private let clock: any WallClock
    /// The provider tokens (token auth), shared by every engine and every transport with this key.
    let tokens: ProviderTokenCache?
    /// The HTTP/2 client under the transport.
    let client: HTTP2Client
    /// The HTTP/2 client to the channel management host (connects with its first request).
    let managementClient: HTTP2Client
    /// Broadcast channels (iOS 18): channel management and broadcast sends, with this transport's authentication.
    public let channels: APNsChannelClient

    public init(name: String, configuration: APNsHTTP2Configuration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        self.logger = context.logger
        self.clock = context.clock
        var hooks: ProviderTokenHooks? = nil
        if case .token(let key, let keyID, let teamID, _) = configuration.authentication {
            let tokens = ProviderTokenCache.shared(key: key, keyID: keyID, teamID: teamID, clock: context.clock)
            self.tokens = tokens
            hooks = ProviderTokenHooks(tokens: tokens, logger: context.logger.with(["transport": name]))
        } else {
            tokens = nil
        }
        do {
            client = try HTTP2Client(configuration: configuration.clientConfiguration, hooks: hooks, name: name, logger: context.logger,
                                     metrics: context.metrics, metricNames: HTTP2MetricNames(prefix: "apns", service: "APNs"),
                                     clock: context.clock)
            managementClient = try HTTP2Client(configuration: configuration.managementClientConfiguration, hooks: hooks,
                                               name: name + ".manage", logger: context.logger, metrics: context.metrics,
                                               metricNames: HTTP2MetricNames(prefix: "apns_manage", service: "APNs channel management"),
                                               clock: context.clock)
        } catch {
            throw TransportError(transport: name, message: error.description)
        }
        channels = APNsChannelClient(management: managementClient, provider: client)
    }

    public var preferredBatchSize: Int { configuration.maxConcurrentStreams * configuration.connections * 2 }

    public func start() async throws {
        do {
            try client.start()
            try managementClient.start()
        } catch {
            throw TransportError(transport: name, message: error.description)
        }
        logger.info("APNs HTTP/2 transport started", ["endpoint": configuration.endpoint.description,
                                                      "connections": String(configuration.connections),
                                                      "engine": configuration.engine.rawValue])
    }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        let batch = APNsRoute.rendered(batch)
        guard !batch.isEmpty else { return [] }
        guard client.isRunning else {
            return batch.map { _ in .retry(after: nil, reason: "transport \(name) was not started") }
        }
        // Signed here to fail the batch early when the key cannot sign; the client sends each
        // request with the token current when it starts (ProviderTokenHooks.willStart).
        if let tokens {
            do { _ = try tokens.current() } catch {
                return batch.map { _ in .setupFailure(reason: "cannot sign a provider token: \(error)") }
            }
        }
        var outcomes = [DeliveryOutcome?](repeating: nil, count: batch.count)
        var requests: [HTTP2Request] = []
        var slots: [Int] = []
        requests.reserveCapacity(batch.count)
        slots.reserveCapacity(batch.count)
        var shapes = RequestShapes(topic: configuration.topic)
        for (slot, delivery) in batch.enumerated() {
            switch shapes.request(for: delivery) {
            case .success(let request):
                requests.append(request)
                slots.append(slot)
            case .failure(let refusal):
                outcomes[slot] = .rejected(reason: refusal.reason)
            }
        }
        let results = await client.send(requests)
        for (i, result) in results.enumerated() {
            outcomes[slots[i]] = outcome(result, for: batch[slots[i]])
        }
        return outcomes.map { $0! }
    }

    /// What the client's result means for the delivery.
    func outcome(_ result: HTTP2Result, for delivery: Delivery) -> DeliveryOutcome {
        switch result {
        case .answered(let response):
            switch ResponseMapping.outcome(status: response.status, body: response.body, apnsID: delivery.messageID.lowercasedString,
                                           retryAfter: response.retryAfter) {
            case .outcome(let outcome): return outcome
            case .refreshProviderToken(let reason):
                // Certificate auth has no token to refresh (token auth resends in ProviderTokenHooks).
                return .retry(after: nil, reason: "\(reason) even with a new provider token: \(ProviderTokenHooks.clockHint)")
            }
        case .noAnswer(let reason):
            return .retry(after: nil, reason: reason)
        case .failed(.noHTTP2):
            return .setupFailure(reason: "\(configuration.endpoint) did not negotiate HTTP/2; APNs requires it")
        case .failed(.notRunning):
            return .retry(after: nil, reason: "transport \(name) was not started")
        case .failed(let error):
            return .rejected(reason: error.description)
        case .endedByHooks(let verdict):
            return verdict as? DeliveryOutcome ?? .retry(after: nil, reason: "the request ended without an answer")
        }
    }

    public func shutdown() async {
        // The client's threads resume this task as they end: no thread waits for them.
        await client.stop(deadline: configuration.timeout)
        await managementClient.stop(deadline: configuration.timeout)
    }

    public func checkReport() async -> [CheckFinding] {
        var findings: [CheckFinding] = []
        switch configuration.authentication {
        case .token(_, let keyID, let teamID, let keyFile):
            findings.append(CheckFinding(.ok, "token auth: ES256 key \(keyID) (P-256) from \(keyFile), team \(teamID)"))
            if let tokens {
                do { _ = try tokens.current(); findings.append(CheckFinding(.ok, "a provider token was signed")) } catch {
                    findings.append(CheckFinding(.error, "cannot sign a provider token: \(error)"))
                }
            }
        case .certificate(let identity, let source):
            let cert = identity.certificate
            findings.append(CheckFinding(.ok, "certificate auth from \(source): \(cert.subject)"))
            findings.append(CheckFinding(.info, "topics: \(cert.topics.isEmpty ? "(none listed)" : cert.topics.joined(separator: ", "))"))
            findings += cert.checkFindings(now: clock.now, environment: configuration.apnsEnvironment)
            if let topic = configuration.topic, !cert.topics.isEmpty, !cert.topics.contains(topic) {
                findings.append(CheckFinding(.warning, "topic \(topic) is not among the certificate's topics"))
            }
        }
        return findings
    }
}
