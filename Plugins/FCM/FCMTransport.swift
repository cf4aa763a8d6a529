import FoundationEssentials
import HeraldCore
import HeraldCrypto
import HeraldHTTP2
import Synchronization

/// The `fcm` transport: Firebase Cloud Messaging's HTTP v1 API over HTTP/2, with OAuth access
/// tokens from a service account.
///
/// Each delivery is one `POST /v1/projects/{projectId}/messages:send` carrying the message
/// rendered at accept time (``FCMRenderer``) with the device's token. Answers are read from the
/// FcmError detail (``FCMResponseMapping``): UNREGISTERED and a bad token retire the device with
/// the answer's time, SENDER_ID_MISMATCH is rejected (and counted in
/// `herald_fcm_sender_id_mismatch_total`), 429 waits for `Retry-After` (60 s without), 5xx and
/// lost answers retry, 401 UNAUTHENTICATED refreshes the access token and sends once more, and a
/// second 401, THIRD_PARTY_AUTH_ERROR, PERMISSION_DENIED or a refused grant pause the transport.
public final class FCMTransport: TransportPlugin {
    public typealias Configuration = FCMConfiguration
    public static let kind = "fcm"
    public static let overrideBlocks = ["fcm"]

    public static func configuration(from node: ConfigNode) -> FCMConfiguration? { FCMConfiguration.read(node) }

    public let name: String
    public let configuration: FCMConfiguration
    private let context: TransportContext
    private let logger: Logger
    private let client: HTTP2Client
    private let tokens: FCMAccessTokenSource
    private let path: String
    private let senderMismatches: Counter
    private let mismatchLogged = Atomic<Bool>(false)
    private let released = Atomic<Bool>(false)

    public var preferredBatchSize: Int { max(1, configuration.maxConcurrentStreams * configuration.connections) }

    public convenience init(name: String, configuration: FCMConfiguration, context: TransportContext) throws {
        try self.init(name: name, configuration: configuration, context: context, tokenEndpoint: nil)
    }

    /// - Parameter tokenEndpoint: stands in for the HTTPS token endpoint (tests); `nil` for the real one.
    init(name: String, configuration: FCMConfiguration, context: TransportContext, tokenEndpoint: (any FCMTokenEndpoint)?) throws {
        self.name = name
        self.configuration = configuration
        self.context = context
        logger = context.logger.labeled("transport.\(name)")
        path = "/v1/projects/\(configuration.projectID)/messages:send"
        senderMismatches = context.metrics.counter("herald_fcm_sender_id_mismatch_total",
                                                   help: "FCM answers SENDER_ID_MISMATCH (a token of another Firebase project), by transport.",
                                                   labels: [("transport", name)])
        do {
            client = try HTTP2Client(configuration: configuration.clientConfiguration(for: configuration.endpoint, connections: configuration.connections),
                                     name: name, logger: logger, metrics: context.metrics)
        } catch {
            throw TransportError(transport: name, message: error.description)
        }
        let credentials = configuration.credentials
        let logger = self.logger
        tokens = FCMAccessTokenSources.acquire(credentials) {
            let endpoint: any FCMTokenEndpoint
            if let tokenEndpoint {
                endpoint = tokenEndpoint
            } else {
                do throws(HTTP2ClientError) {
                    endpoint = try FCMHTTPTokenEndpoint(uri: credentials.tokenURI, configuration: configuration, transport: name, context: context)
                } catch {
                    logger.error("cannot set up the token endpoint's HTTP/2 client", ["error": error.description])
                    endpoint = UnreachableTokenEndpoint(reason: error.description)
                }
            }
            return FCMAccessTokenSource(credentials: credentials, endpoint: endpoint, clock: context.clock, logger: logger)
        }
    }

    public func start() async throws {
        do { try client.start() } catch { throw TransportError(transport: name, message: error.description) }
    }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        guard !batch.isEmpty else { return [] }
        var outcomes = [DeliveryOutcome?](repeating: nil, count: batch.count)
        var pending = Array(batch.indices)
        for round in 0..<2 {
            let token: Secret
            do { token = try await tokens.token() } catch {
                let outcome: DeliveryOutcome
                switch error {
                case .setup(let reason): outcome = .setupFailure(reason: reason)
                case .temporary(let reason, let after): outcome = .retry(after: after, reason: reason)
                }
                for i in pending { outcomes[i] = outcome }
                break
            }
            let headers = [HTTP2Header("authorization", "Bearer " + token.value), HTTP2Header("content-type", "application/json; charset=UTF-8")]
            let now = context.clock.now
            let requests = pending.map { i in
                HTTP2Request(method: "POST", path: path, headers: headers,
                             body: HTTP2Body(FCMBody.make(batch[i].payload, token: batch[i].token, validateOnly: configuration.validateOnly, now: now)))
            }
            let results = await client.send(requests)
            let answeredAt = context.clock.now
            var again: [Int] = []
            for (i, result) in zip(pending, results) {
                switch FCMResponseMapping.map(result, now: answeredAt) {
                case .outcome(let outcome):
                    outcomes[i] = outcome
                    if case .rejected(let reason) = outcome, reason.hasPrefix("SENDER_ID_MISMATCH") { noteSenderMismatch(batch[i]) }
                case .unauthenticated:
                    if round == 0 {
                        again.append(i)
                    } else {
                        outcomes[i] = .setupFailure(reason: "FCM refused a freshly fetched access token (401 UNAUTHENTICATED twice) for \(configuration.credentials.description); check the service account's roles and projectId")
                    }
                }
            }
            guard !again.isEmpty else { break }
            logger.info("FCM refused the access token (401); fetching a new one and sending once more", ["count": String(again.count)])
            await tokens.invalidate(token)
            pending = again
        }
        return outcomes.map { $0 ?? .retry(after: nil, reason: "not sent") }
    }

    private func noteSenderMismatch(_ delivery: Delivery) {
        senderMismatches.increment()
        if mismatchLogged.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
            logger.warning("FCM answered SENDER_ID_MISMATCH: the token belongs to another Firebase project than \(configuration.projectID); such sends are rejected and counted in herald_fcm_sender_id_mismatch_total (logged once)",
                           ["token": Redact.token(delivery.token), "app": delivery.app])
        }
    }

    public func shutdown() async {
        await client.stop(deadline: configuration.timeout)
        guard released.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        if FCMAccessTokenSources.release(tokens) { await tokens.stop() }
    }

    public func checkReport() async -> [CheckFinding] {
        let c = configuration.credentials
        var findings = [CheckFinding(.ok, "\(c.description) from \(c.source); tokens from \(c.tokenURI)")]
        if let problem = c.keyProblem { findings.append(CheckFinding(.error, problem)) }
        if c.projectID != configuration.projectID {
            findings.append(CheckFinding(.info, "sending for project \(configuration.projectID), the service account's is \(c.projectID)"))
        }
        if configuration.validateOnly { findings.append(CheckFinding(.warning, "validateOnly: FCM checks messages and delivers none")) }
        return findings
    }
}

/// A token endpoint that cannot be reached at all (its TLS or proxy settings are unusable).
struct UnreachableTokenEndpoint: FCMTokenEndpoint {
    var reason: String
    func exchange(assertion: String) async -> FCMTokenGrant { .refused("cannot reach the token endpoint: \(reason)") }
    func stop() async {}
}
