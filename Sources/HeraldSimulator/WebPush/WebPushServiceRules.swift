import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// What the Web Push simulator checks and which faults it plays, independent of the server
/// under it: one request in, one answer out (and a record of what it accepted).
///
/// Checks, in order, as browsers' push services answer: 405 for a method other than POST; 404
/// for a path that names no subscription of the seed; the `--not-found` and `--gone` faults
/// (404, 410); 400 without `TTL` (or with one that is not a whole number), for `Urgency` outside
/// `very-low`…`high`, a `Topic` longer than 32 characters or outside base64url, a
/// `Content-Encoding` other than `aes128gcm`; 413 above 4096 bytes; 401 without a VAPID
/// `Authorization`, 403 `BadJwtToken` for a bad signature, `aud` other than this origin, `exp`
/// past or more than 24 h ahead, or a `sub` that is not `mailto:`/`https:`; 403
/// `VapidPkHashMismatch` when `k` is not the key the subscription was made with; then the
/// counted faults (429, then 5xx, with `Retry-After`); 400 when the body does not decrypt. A
/// message that passes everything is decrypted, recorded and answered 201 with a `Location`.
public final class WebPushServiceRules: Sendable {
    /// One request as the server read it.
    public struct Request: Sendable {
        public var method: String
        public var path: String
        /// Lower-case names.
        public var headers: [(name: String, value: String)]
        public var body: [UInt8]
        /// `https://host:port` of the listener it came to (the `aud` it must carry).
        public var origin: String

        public init(method: String, path: String, headers: [(name: String, value: String)], body: [UInt8], origin: String) {
            self.method = method
            self.path = path
            self.headers = headers
            self.body = body
            self.origin = origin
        }

        func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
    }

    /// The answer.
    public struct Answer: Sendable, Equatable {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]

        static func reason(_ status: Int, _ reason: String, retryAfter: Int? = nil) -> Answer {
            var w = JSONWriter(capacity: 64)
            w.object { $0.string("reason", reason) }
            var headers = ["content-type": "application/json"]
            if let retryAfter { headers["retry-after"] = String(retryAfter) }
            return Answer(status: status, headers: headers, body: w.bytes)
        }
    }

    /// Faults and the subscriptions' keys.
    public struct Faults: Sendable {
        /// Subscriptions answered 404.
        public var notFound: Set<Int> = []
        /// Subscriptions answered 410 (expired or unsubscribed).
        public var gone: Set<Int> = []
        /// Subscriptions made with another applicationServerKey: 403 for any VAPID key.
        public var mismatchedKey: Set<Int> = []
        /// The applicationServerKey every subscription was made with; `nil`: any key is accepted.
        public var applicationServerKey: P256PublicKey?
        /// The first N valid requests are answered 429 with `Retry-After`.
        public var tooManyRequests = 0
        /// Then the next N are answered 503 with `Retry-After`.
        public var serverErrors = 0
        /// `Retry-After` seconds of those answers.
        public var retryAfter = 1

        public init() {}
    }

    /// A message the simulator accepted.
    public struct Received: Sendable {
        public var time: Date
        public var origin: String
        public var subscription: Int
        public var ttl: Int
        public var urgency: String?
        public var topic: String?
        public var vapidSubject: String?
        public var vapidAudience: String
        public var vapidKey: String
        /// The VAPID JWT's `exp` (tells tokens apart without keeping them).
        public var vapidExpiresAt: Date
        /// The decrypted message.
        public var plaintext: [UInt8]
        /// The plaintext parsed as JSON, when it is.
        public var json: JSONValue? { try? JSONValue.parse(plaintext) }

        var jsonLine: [UInt8] {
            var w = JSONWriter(capacity: 256 + plaintext.count)
            w.object { o in
                o.string("time", time.iso8601)
                o.string("origin", origin)
                o.int("subscription", subscription)
                o.int("ttl", ttl)
                o.string("urgency", urgency)
                o.string("topic", topic)
                o.string("vapid_sub", vapidSubject)
                o.string("vapid_aud", vapidAudience)
                o.string("vapid_k", vapidKey)
                o.string("vapid_exp", vapidExpiresAt.iso8601)
                if let json { o.value("message", json) } else { o.string("message", String(decoding: plaintext, as: UTF8.self)) }
            }
            w.raw(UInt8(ascii: "\n"))
            return w.bytes
        }
    }

    private struct Counters {
        var requests = 0
        var accepted = 0
        var refused: [Int: Int] = [:]
        var faultsPlayed = 0
        var received: [Received] = []
        var sequence = 0
    }

    public let subscriptions: SimulatedSubscriptions
    public let faults: Faults
    private let clock: any WallClock
    private let record: RecordFile?
    private let keepReceived: Bool
    private let counters = Locked(Counters())
    private let keys = Locked<[Int: SimulatedSubscriptions.Subscription]>([:])

    /// - Parameters:
    ///   - recordPath: JSON Lines file of every accepted message (decrypted); `nil` for none.
    ///   - keepReceived: keep accepted messages in memory for ``received`` (tests).
    public init(subscriptions: SimulatedSubscriptions, faults: Faults, clock: any WallClock = SystemClock(),
                recordPath: String? = nil, keepReceived: Bool = true) throws(WebPushSimulatorError) {
        self.subscriptions = subscriptions
        self.faults = faults
        self.clock = clock
        self.keepReceived = keepReceived
        if let recordPath {
            do { record = try RecordFile(path: recordPath, truncate: false) } catch { throw WebPushSimulatorError(error.description) }
        } else {
            record = nil
        }
    }

    /// What it accepted, oldest first (with `keepReceived`).
    public var received: [Received] { counters.withLock { $0.received } }

    /// `N requests, N accepted, refused: 403×2, 410×1`.
    public var summary: String {
        counters.withLock { c in
            let refused = c.refused.keys.sorted().map { "\($0)×\(c.refused[$0]!)" }.joined(separator: ", ")
            return "\(c.requests) requests, \(c.accepted) accepted" + (refused.isEmpty ? "" : ", refused: \(refused)")
        }
    }

    /// How many requests answered with `status`.
    public func count(status: Int) -> Int { counters.withLock { status == 201 ? $0.accepted : $0.refused[status] ?? 0 } }

    /// Closes the record file.
    public func close() { record?.close() }

    /// Checks and answers one request.
    public func answer(_ request: Request) -> Answer {
        let answer = check(request)
        counters.withLock { c in
            c.requests += 1
            if answer.status != 201 { c.refused[answer.status, default: 0] += 1 }
        }
        return answer
    }

    private func check(_ r: Request) -> Answer {
        guard r.method == "POST" else { return .reason(405, "MethodNotAllowed") }
        guard let index = subscriptions.index(path: r.path) else { return .reason(404, "NoSuchSubscription") }
        if faults.notFound.contains(index) { return .reason(404, "NoSuchSubscription") }
        if faults.gone.contains(index) { return .reason(410, "Unsubscribed") }
        guard let ttlText = r.header("ttl") else { return .reason(400, "MissingTTL") }
        guard let ttl = Int(ttlText), ttl >= 0 else { return .reason(400, "BadTTL") }
        let urgency = r.header("urgency")
        if let urgency, !["very-low", "low", "normal", "high"].contains(urgency) { return .reason(400, "BadUrgency") }
        let topic = r.header("topic")
        if let topic, topic.isEmpty || topic.utf8.count > 32 || !topic.utf8.allSatisfy(Self.isBase64URL) { return .reason(400, "BadWebPushTopic") }
        guard r.header("content-encoding")?.lowercased() == "aes128gcm" else { return .reason(400, "UnsupportedContentEncoding") }
        guard r.body.count <= 4096 else { return .reason(413, "PayloadTooLarge") }
        guard !r.body.isEmpty else { return .reason(400, "EmptyPayload") }
        guard let authorization = r.header("authorization") else { return .reason(401, "MissingAuthorization") }
        let credentials: VAPIDCredentials
        do throws(VAPIDVerificationError) {
            credentials = try VAPIDSigner.verify(authorization: authorization)
            try credentials.check(expectedAudience: r.origin, now: clock.now)
        } catch {
            return .reason(403, "BadJwtToken: \(error)")
        }
        guard let subject = credentials.subject else { return .reason(403, "BadJwtToken: no sub claim") }
        do throws(VAPIDError) { try VAPIDSigner.validateSubject(subject) } catch { return .reason(403, "BadJwtToken: \(error)") }
        if faults.mismatchedKey.contains(index) || (faults.applicationServerKey.map { $0 != credentials.publicKey } ?? false) {
            return .reason(403, "VapidPkHashMismatch")
        }
        let fault: Answer? = counters.withLock { c in
            guard c.faultsPlayed < faults.tooManyRequests + faults.serverErrors else { return nil }
            c.faultsPlayed += 1
            return c.faultsPlayed <= faults.tooManyRequests
                ? .reason(429, "TooManyRequests", retryAfter: faults.retryAfter)
                : .reason(503, "ServiceUnavailable", retryAfter: faults.retryAfter)
        }
        if let fault { return fault }
        let subscription = keys.withLock { k in
            if let s = k[index] { return s }
            let s = subscriptions.subscription(index)
            k[index] = s
            return s
        }
        let plaintext: [UInt8]
        do throws(WebPushEncryptionError) {
            plaintext = try WebPushEncryption.decrypt(body: r.body, userAgentPrivateKey: subscription.privateKey, authSecret: subscription.auth)
        } catch {
            return .reason(400, "DecryptionFailed: \(error)")
        }
        let received = Received(time: clock.now, origin: r.origin, subscription: index, ttl: ttl, urgency: urgency, topic: topic,
                                vapidSubject: subject, vapidAudience: credentials.audience, vapidKey: credentials.publicKey.base64URL,
                                vapidExpiresAt: credentials.expiresAt, plaintext: plaintext)
        let id: Int = counters.withLock { c in
            c.accepted += 1
            c.sequence += 1
            if keepReceived { c.received.append(received) }
            return c.sequence
        }
        record?.write(received.jsonLine)
        return Answer(status: 201, headers: ["location": "\(r.origin)/message/\(index)-\(id)"], body: [])
    }

    static func isBase64URL(_ b: UInt8) -> Bool {
        (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x5F
    }
}

/// Why the Web Push simulator cannot start or run; the message names the cause and the fix.
public struct WebPushSimulatorError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
