import Dispatch
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto

/// The `apns-http2` transport: APNs' HTTP/2 provider API through libcurl or libnghttp2.
///
/// Token auth (ES256 JWT from a `.p8` key, one token shared by all connections, chosen as each
/// request starts) or certificate auth (mutual TLS). Each configured connection is an
/// ``APNsEngine`` on its own thread multiplexing many streams: a ``CurlEngine`` (libcurl multi
/// handle, the default) or an ``NGHTTP2Engine`` (`"engine": "nghttp2"`). Apple's answers become outcomes through
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
    private let metrics: TransportMetrics
    private let engines: Locked<[any APNsEngine]>
    private let nextEngine = Locked(0)

    public init(name: String, configuration: APNsHTTP2Configuration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        self.logger = context.logger
        self.clock = context.clock
        if case .token(let key, let keyID, let teamID, _) = configuration.authentication {
            tokens = ProviderTokenCache.shared(key: key, keyID: keyID, teamID: teamID, clock: context.clock)
        } else {
            tokens = nil
        }
        metrics = TransportMetrics(registry: context.metrics, transport: name)
        engines = Locked([])
    }

    /// The engines running now (for tests).
    var runningEngines: [any APNsEngine] { engines.withLock { $0 } }

    public var preferredBatchSize: Int { configuration.maxConcurrentStreams * configuration.connections * 2 }

    public func start() async throws {
        let settings = EngineSettings(configuration: configuration, name: name, logger: logger, tokens: tokens, metrics: metrics)
        var started: [any APNsEngine] = []
        for i in 0..<configuration.connections {
            let engine: any APNsEngine = switch configuration.engine {
            case .curl: try CurlEngine(settings: settings, index: i)
            case .nghttp2: try NGHTTP2Engine(settings: settings, index: i)
            }
            engine.start()
            started.append(engine)
        }
        engines.withLock { $0 = started }
        metrics.connections.set(Double(started.count))
        logger.info("APNs HTTP/2 transport started", ["endpoint": configuration.endpoint.description,
                                                      "connections": String(started.count),
                                                      "engine": configuration.engine.rawValue])
    }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        let batch = APNsRoute.rendered(batch)
        guard !batch.isEmpty else { return [] }
        let engines = self.engines.withLock { $0 }
        guard !engines.isEmpty else {
            return batch.map { _ in .retry(after: nil, reason: "transport \(name) was not started") }
        }
        let completion = BatchCompletion(count: batch.count)
        // Signed here to fail the batch early when the key cannot sign; the engine sends each
        // request with the token current when it starts (see EngineCore.startWaiting).
        var token: ProviderTokenCache.Token? = nil
        if let tokens {
            do { token = try tokens.current() } catch {
                return batch.map { _ in .setupFailure(reason: "cannot sign a provider token: \(error)") }
            }
        }
        var perEngine = Array(repeating: [PendingRequest](), count: engines.count)
        let first = nextEngine.withLock { n -> Int in
            defer { n = (n + 1) % engines.count }
            return n
        }
        var payloads = PayloadBytes.Cache()
        for (slot, delivery) in batch.enumerated() {
            let options = APNsSendOptions(delivery.payload)
            let pushType = options.pushType
            if delivery.payload.body.count > pushType.maxPayloadBytes {
                completion.complete(slot, .rejected(reason: "PayloadTooLarge: the payload is \(delivery.payload.body.count) bytes; APNs accepts at most \(pushType.maxPayloadBytes) for \(pushType.rawValue) notifications"))
                continue
            }
            let key = HeaderShape.Key(pushType: pushType,
                                      topic: pushType.topic(forBundleID: configuration.topic ?? delivery.topic),
                                      priority: options.priority, expiration: options.expiration,
                                      collapseID: options.collapseID, authorization: token?.header)
            let request = PendingRequest(delivery: delivery, payload: payloads.bytes(for: delivery), slot: slot, batch: completion,
                                         shapeKey: key, token: token,
                                         retries: configuration.connectionRetries)
            perEngine[(first + slot * engines.count / max(batch.count, 1)) % engines.count].append(request)
        }
        for (i, requests) in perEngine.enumerated() where !requests.isEmpty { engines[i].submit(requests) }
        return await completion.wait()
    }

    public func shutdown() async {
        let engines = self.engines.withLock { e -> [any APNsEngine] in
            defer { e = [] }
            return e
        }
        let deadline = configuration.timeout
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                for engine in engines { engine.stop(deadline: deadline) }
                c.resume()
            }
        }
        metrics.connections.set(0)
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

/// The transport's metric handles.
struct TransportMetrics: Sendable {
    let inFlight: Gauge
    let connections: Gauge
    let reconnects: Counter
    let noAnswer: Counter
    private let registry: MetricsRegistry
    private let transport: String

    init(registry: MetricsRegistry, transport: String) {
        self.registry = registry
        self.transport = transport
        let labels = [("transport", transport)]
        inFlight = registry.gauge("herald_apns_requests_in_flight", help: "APNs requests sent and not yet answered.", labels: labels)
        connections = registry.gauge("herald_apns_connections", help: "APNs HTTP/2 connections (engines) open.", labels: labels)
        reconnects = registry.counter("herald_apns_connection_failures_total", help: "APNs connection failures (each starts a backoff).", labels: labels)
        noAnswer = registry.counter("herald_apns_requests_without_answer_total", help: "APNs requests that failed without an answer (dropped connection, GOAWAY, timeout).", labels: labels)
    }

    /// The counter of APNs answers with this HTTP status (look it up once, then keep it).
    func responses(status: Int) -> Counter {
        registry.counter("herald_apns_responses_total", help: "APNs answers by HTTP status.",
                         labels: [("transport", transport), ("status", String(status))])
    }

}
