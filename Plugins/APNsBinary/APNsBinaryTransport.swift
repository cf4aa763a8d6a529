import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto

/// The `apns-binary` transport: APNs' legacy binary provider API (commands 2, 1 or 0 over TLS
/// with a client certificate) and its feedback service.
///
/// Each configured connection is a ``GatewayConnection``: kept open, streaming on its own
/// thread, reconnecting with backoff. The gateway answers nothing on success, so a delivery is
/// reported `.delivered` only when an error response proves it was accepted (see
/// ``SentWindow``); the outcome's `evidence` says which. The transport reports what the feedback
/// service says through ``DeadTokenSource``; the host applies it to the store.
public final class APNsBinaryTransport: TransportPlugin, DeadTokenSource {
    public typealias Configuration = APNsBinaryConfiguration
    public static let overrideBlocks = [APNsOptions.block]

    public static let kind = "apns-binary"

    public static func configuration(from node: ConfigNode) -> APNsBinaryConfiguration? {
        APNsBinaryConfiguration.read(node)
    }

    public let name: String
    private let configuration: APNsBinaryConfiguration
    private let logger: Logger
    private let clock: any WallClock
    private let metrics: BinaryMetrics
    private let connections = Locked<[GatewayConnection]>([])
    private let nextConnection = Locked(0)

    public init(name: String, configuration: APNsBinaryConfiguration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        self.logger = context.logger
        self.clock = context.clock
        self.metrics = BinaryMetrics(registry: context.metrics, transport: name)
    }

    /// Large: a batch is written at once and settled by one proof.
    public var preferredBatchSize: Int { 5000 }

    /// `feedbackInterval` (`nil` when it is 0).
    public var deadTokenPollInterval: TimeInterval? { configuration.feedbackInterval }

    private func tlsContext() throws -> TLSClientContext {
        do {
            return try TLSClientContext(caFile: configuration.caFile, identity: configuration.identity)
        } catch {
            throw TransportError(transport: name, message: error.message)
        }
    }

    /// Starts the connection threads; each connects when it has something to write.
    public func start() async throws {
        let settings = GatewaySettings(name: name, configuration: configuration, tls: try tlsContext(), logger: logger,
                                       clock: clock, metrics: metrics)
        let started = (0..<configuration.connections).map { GatewayConnection(settings: settings, index: $0) }
        for c in started { c.start() }
        connections.withLock { $0 = started }
        logger.info("APNs binary transport started", ["endpoint": configuration.endpoint.description,
                                                      "connections": String(started.count), "format": configuration.format.rawValue])
    }

    /// Checks each delivery (32-byte token, `maxPayload`), hands the rest to the connections in
    /// contiguous ordered parts, and returns once every one has its outcome: proven delivered,
    /// or what the gateway or a lost connection decided.
    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        let batch = APNsRoute.rendered(batch)
        guard !batch.isEmpty else { return [] }
        let connections = self.connections.withLock { $0 }
        guard !connections.isEmpty else {
            return batch.map { _ in .retry(after: nil, reason: "transport \(name) was not started") }
        }
        let completion = BinaryBatch(count: batch.count)
        let maxPayload = configuration.maxPayload
        var frames: [BinaryFrame] = []
        frames.reserveCapacity(batch.count)
        batch.withUnsafeBufferPointer { deliveries in
            // Fields are read in place: a `Delivery` is large, and copying each one would cost
            // more than everything else done here.
            for slot in deliveries.indices {
                let size = deliveries[slot].payload.body.count
                if size > maxPayload {
                    completion.complete(slot, .rejected(reason: "7 Invalid payload size: the payload is \(size) bytes; maxPayload is \(maxPayload) (not sent)"))
                    continue
                }
                guard let token = BinaryHex.decode(deliveries[slot].token, count: 32) else {
                    completion.complete(slot, .rejected(reason: "5 Invalid token size: the binary provider API takes 32-byte tokens; this one is \(deliveries[slot].token.utf8.count / 2) bytes (not sent)"))
                    continue
                }
                let options = APNsSendOptions(deliveries[slot].payload)
                let expiration = options.expiration ?? 0
                frames.append(BinaryFrame(batch: completion, slot: slot, token: token, payload: deliveries[slot].payload.body,
                                          expiry: UInt32(clamping: max(0, expiration)),
                                          priority: options.priority == 10 ? 10 : 5))
            }
        }
        if !frames.isEmpty {
            if connections.count == 1 {
                connections[0].submit(frames)
            } else {
                // Contiguous shares keep each connection's part of the batch in order.
                let first = nextConnection.withLock { n -> Int in defer { n = (n + 1) % connections.count }; return n }
                let share = (frames.count + connections.count - 1) / connections.count
                for (i, start) in stride(from: 0, to: frames.count, by: share).enumerated() {
                    connections[(first + i) % connections.count].submit(Array(frames[start..<min(start + share, frames.count)]))
                }
            }
        }
        return await completion.wait()
    }

    /// Writes what is queued, proves the tail on every connection, then closes them.
    public func shutdown() async {
        let connections = self.connections.withLock { c -> [GatewayConnection] in defer { c = [] }; return c }
        await withTaskGroup(of: Void.self) { group in
            for c in connections { group.addTask { await c.stop() } }
        }
    }

    /// Reads the feedback service once (on a thread of its own): each tuple becomes a report.
    public func fetchDeadTokens() async throws -> [DeadToken] {
        let context = try tlsContext()
        let endpoint = configuration.feedbackEndpoint
        let timeout = configuration.timeout
        let result: Result<[APNsFeedbackTuple], CryptoError> = await withCheckedContinuation { c in
            OSThread.start(name: "apns-feedback-\(name)") {
                c.resume(returning: Result { () throws(CryptoError) in
                    try FeedbackReader.read(endpoint: endpoint, context: context, timeout: timeout)
                })
            }
        }
        switch result {
        case .success(let tuples):
            logger.info("feedback service read", ["endpoint": endpoint.description, "tokens": String(tuples.count)])
            metrics.feedbackTokens.increment(by: Int64(tuples.count))
            return tuples.map {
                DeadToken(token: $0.tokenHex, since: Date(timeIntervalSince1970: TimeInterval($0.time)),
                          reason: "feedback service: the app is no longer installed")
            }
        case .failure(let error):
            if let problem = BinaryStatusMapping.setupProblem(error.message) {
                throw TransportError(transport: name, message: "feedback service \(endpoint): \(problem)")
            }
            throw TransportError(transport: name, message: "cannot read the feedback service \(endpoint): \(error.message)")
        }
    }

    /// Subject, topic (UID, else Apple's topics extension), expiry and environment of the certificate.
    public func checkReport() async -> [CheckFinding] {
        let cert = configuration.identity.certificate
        var findings = [CheckFinding(.ok, "certificate from \(configuration.identitySource): \(cert.subject)")]
        if let uid = cert.uid, !uid.isEmpty {
            findings.append(CheckFinding(.ok, "topic \(uid) (the certificate's UID)"))
        } else if let topic = cert.topics.first {
            findings.append(CheckFinding(.ok, "topic \(topic) (Apple's topics extension: \(cert.topics.joined(separator: ", ")))"))
        } else {
            findings.append(CheckFinding(.error, "the certificate names no topic (no UID, no topics extension); the gateway answers status 3 (missing topic)"))
        }
        findings += cert.checkFindings(now: clock.now, environment: configuration.apnsEnvironment)
        findings.append(CheckFinding(.info, "gateway \(configuration.endpoint), feedback \(configuration.feedbackEndpoint), format \(configuration.format.rawValue), maxPayload \(configuration.maxPayload)"))
        return findings
    }
}

/// The transport's metric handles.
struct BinaryMetrics: Sendable {
    let connects: Counter
    let failures: Counter
    let proofs: Counter
    let delivered: Counter
    let resent: Counter
    let feedbackTokens: Counter

    init(registry: MetricsRegistry, transport: String) {
        let labels = [("transport", transport)]
        connects = registry.counter("herald_apns_binary_connects_total", help: "Connections made to the binary gateway.", labels: labels)
        failures = registry.counter("herald_apns_binary_connection_failures_total", help: "Gateway connections that failed or ended without an answer.", labels: labels)
        proofs = registry.counter("herald_apns_binary_proofs_total", help: "Proof notifications written (each ends a connection).", labels: labels)
        delivered = registry.counter("herald_apns_binary_proven_total", help: "Notifications proven accepted by the gateway.", labels: labels)
        resent = registry.counter("herald_apns_binary_resent_total", help: "Notifications written again after an error response or a lost connection.", labels: labels)
        feedbackTokens = registry.counter("herald_apns_feedback_tokens_total", help: "Dead tokens read from the feedback service.", labels: labels)
    }
}
