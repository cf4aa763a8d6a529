import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// A simulator of Apple's legacy binary provider API (gateway.push.apple.com:2195), as a real server.
///
/// Speaks commands 0 (simple), 1 (enhanced) and 2 (frame) over TLS with a required client
/// certificate (or plaintext TCP for protocol tests). Accepted notifications produce no answer;
/// the first invalid one gets the 6-byte error response `[8][status][identifier]`, after which
/// the connection closes and everything the client sent after it is discarded, as Apple did.
/// Rules and faults live in ``APNsBinaryRules`` and can be changed while running.
///
/// ```swift
/// let sim = try APNsBinarySimulator(configuration: .init(tls: files))
/// try sim.start()               // listens on 127.0.0.1, port sim.port
/// sim.setInvalidTokens([hex])   // status 8 from now on
/// _ = await sim.waitForNotifications(count: 3)
/// sim.received                  // what arrived, with the client certificate's identity
/// sim.stop()
/// ```
public final class APNsBinarySimulator: Sendable {
    /// How to run the simulator.
    public struct Configuration: Sendable {
        /// Address to listen on (an IP literal). Default 127.0.0.1.
        public var host = "127.0.0.1"
        /// Port; 0 lets the kernel choose (read ``APNsBinarySimulator/port`` after ``start()``).
        public var port = 0
        /// TLS with client certificates; `nil` serves plaintext TCP (no certificate, so no topic).
        public var tls: APNsBinaryTLSFiles?
        /// Validation rules and faults.
        public var rules = APNsBinaryRules()
        /// Tokens (lower-case hex) of apps that are gone: accepted without error, as APNs could
        /// not know at send time, and added to ``feedback`` (if set) with the time they were sent.
        public var uninstalledTokens: Set<String> = []
        /// The feedback service that learns about ``uninstalledTokens``.
        public var feedback: FeedbackSimulator?
        /// Where to append one JSON line per event; `nil` records only in memory.
        public var record: BinaryRecordSink?
        /// Seconds a client may take to finish the TLS handshake.
        public var handshakeTimeout: Double = 10
        /// Most accepted notifications kept in ``APNsBinarySimulator/received`` (the oldest are
        /// dropped first); `nil` keeps all. Long-running processes should set a limit.
        public var retainLimit: Int? = nil
        /// Logs connections and rejections (info), each notification (debug).
        public var logger: Logger = .disabled

        public init(host: String = "127.0.0.1", port: Int = 0, tls: APNsBinaryTLSFiles? = nil,
                    rules: APNsBinaryRules = APNsBinaryRules()) {
            self.host = host
            self.port = port
            self.tls = tls
            self.rules = rules
        }
    }

    /// A notification the gateway accepted.
    public struct Received: Sendable, Hashable {
        public var notification: APNsBinaryNotification
        /// Connection number (1 for the first connection since start).
        public var connection: Int
        /// The client certificate's identity; `nil` on plaintext.
        public var client: APNsBinaryClientIdentity?
        public var time: Date
        /// Whether the payload parses as a JSON object (checked when asked). The gateway does
        /// not reject other payloads (Apple's binary API had no status for it); the record file
        /// marks them `"json": false`.
        public var payloadIsJSON: Bool { (try? JSONValue.parse(Data(notification.payload)))?.objectValue != nil }
    }

    /// An error response the gateway sent before closing a connection.
    public struct Rejection: Sendable, Hashable {
        public var response: APNsBinaryErrorResponse
        public var connection: Int
        /// The failed notification's command and token (hex), when it could be read.
        public var command: UInt8?
        public var tokenHex: String?
        /// Bytes already received after the failed notification, thrown away.
        public var discardedBytes: Int
        public var time: Date
    }

    private struct State {
        var received: [Received] = []
        var acceptedTotal = 0
        var rejections: [Rejection] = []
        var refused: [String] = []
        var connections = 0
        var drops = 0
        var server: BinaryThreadedServer?
    }

    public let configuration: Configuration
    private let rulesBox: Locked<APNsBinaryRules>
    private let uninstalled: Locked<Set<String>>
    private let state = Locked(State())

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.rulesBox = Locked(configuration.rules)
        self.uninstalled = Locked(Set(configuration.uninstalledTokens.map { $0.lowercased() }))
    }

    /// Binds and starts serving. - Throws: ``BinarySimulatorError`` naming the address or file at fault.
    public func start() throws(BinarySimulatorError) {
        let server = try BinaryThreadedServer(
            host: configuration.host, port: configuration.port, tls: configuration.tls,
            handshakeTimeout: configuration.handshakeTimeout,
            refusal: { [self] connection, reason in refused(connection, reason) },
            handler: { [self] stream, connection in serve(stream, connection: connection) })
        state.withLock { $0.server = server }
        server.start(announcing: "binary gateway listening", to: configuration.logger)
    }

    /// The bound port (0 before ``start()``).
    public var port: Int { state.withLock { $0.server?.listener.port ?? 0 } }

    /// Stops listening, closes every connection, and waits for their threads.
    public func stop() {
        let server = state.withLock { $0.server }
        server?.stop()
    }

    // MARK: What arrived

    /// Accepted notifications, in order of arrival (the latest ``Configuration/retainLimit``).
    public var received: [Received] {
        state.withLock { s in configuration.retainLimit.map { Array(s.received.suffix(max($0, 0))) } ?? s.received }
    }
    /// Notifications accepted since start (or ``clearRecords()``), including any no longer retained.
    public var acceptedCount: Int { state.withLock { $0.acceptedTotal } }
    /// Error responses sent, in order.
    public var rejections: [Rejection] { state.withLock { $0.rejections } }
    /// Clients refused at the TLS handshake, with the reason.
    public var refusedHandshakes: [String] { state.withLock { $0.refused } }
    /// Connections that completed the handshake.
    public var connectionCount: Int { state.withLock { $0.connections } }
    /// Connections dropped by ``APNsBinaryRules/dropAfter``.
    public var dropCount: Int { state.withLock { $0.drops } }

    /// Forgets what was recorded (not the rules).
    public func clearRecords() {
        state.withLock { s in
            s.received = []
            s.acceptedTotal = 0
            s.rejections = []
            s.refused = []
        }
    }

    /// Waits until at least `count` notifications were accepted; `false` on timeout.
    public func waitForNotifications(count: Int, timeout: Double = 10) async -> Bool {
        await poll(timeout: timeout) { $0.acceptedTotal >= count }
    }

    /// Waits until at least `count` error responses were sent; `false` on timeout.
    public func waitForRejections(count: Int, timeout: Double = 10) async -> Bool {
        await poll(timeout: timeout) { $0.rejections.count >= count }
    }

    /// Waits until at least `count` clients were refused at the handshake; `false` on timeout.
    public func waitForRefusals(count: Int, timeout: Double = 10) async -> Bool {
        await poll(timeout: timeout) { $0.refused.count >= count }
    }

    private func poll(timeout: Double, _ condition: @Sendable (State) -> Bool) async -> Bool {
        await SimulatorWait.until(timeout: timeout, every: 5_000_000) { state.withLock { condition($0) } }
    }

    // MARK: Rules and faults (apply at once, also to open connections)

    /// The current rules.
    public var rules: APNsBinaryRules { rulesBox.value }
    /// Replaces every rule.
    public func setRules(_ rules: APNsBinaryRules) { rulesBox.withLock { $0 = rules } }
    /// Changes some rules.
    public func updateRules(_ change: (inout APNsBinaryRules) -> Void) {
        rulesBox.withLock { change(&$0) }
    }
    /// Tokens (hex) rejected with status 8 from now on; replaces the previous set.
    public func setInvalidTokens(_ tokens: some Sequence<String>) {
        let set = Set(tokens.map { $0.lowercased() })
        rulesBox.withLock { $0.invalidTokens = set }
    }
    /// Rejects `token` (hex) with `status` from now on (a fault; `nil` removes it).
    public func setFault(token: String, status: APNsBinaryStatus?) {
        rulesBox.withLock { $0.tokenFaults[token.lowercased()] = status }
    }
    /// Shuts each connection down (status 10) after `count` accepted notifications; `nil` never.
    public func setShutdownAfter(_ count: Int?) { rulesBox.withLock { $0.shutdownAfter = count } }
    /// Drops each connection (no error response) after `count` accepted notifications; `nil` never.
    public func setDropAfter(_ count: Int?) { rulesBox.withLock { $0.dropAfter = count } }
    /// Marks `token` (hex) as an uninstalled app: accepted, then reported by the feedback service.
    public func addUninstalledToken(_ token: String) { uninstalled.withLock { _ = $0.insert(token.lowercased()) } }

    // MARK: Serving

    private func refused(_ connection: Int, _ reason: String) {
        state.withLock { $0.refused.append(reason) }
        configuration.logger.info("client refused at handshake", ["connection": "\(connection)", "reason": reason])
        configuration.record?.write { o in
            o.string("event", "refused")
            o.string("time", Date().iso8601)
            o.int("connection", connection)
            o.string("reason", reason)
        }
    }

    private func serve(_ stream: any BinaryByteStream, connection: Int) -> BinaryConnectionEnd {
        let logger = configuration.logger.with(["connection": "\(connection)"])
        let client = stream.client
        state.withLock { $0.connections += 1 }
        logger.info("client connected", ["subject": client?.subject ?? "(plaintext)"])
        configuration.record?.write { o in
            o.string("event", "connected")
            o.string("time", Date().iso8601)
            o.int("connection", connection)
            o.client(client)
        }
        var session = BinaryGatewaySession(client: client)
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var events = session.begin(rules: rulesBox.value)
        while true {
            for event in events { handle(event, connection: connection, client: client, stream: stream, logger: logger) }
            if events.contains(where: { if case .dropped = $0 { return true } else { return false } }) { return .close }
            if session.isFinished {
                guard !rulesBox.value.answersErrors else { break }
                // Silent: no answer, no close; swallow input until the client gives up.
                while case .bytes = buffer.withUnsafeMutableBytes({ stream.read(into: $0) }) {}
                return .close
            }
            let result = buffer.withUnsafeMutableBytes { stream.read(into: $0) }
            switch result {
            case .bytes(let n):
                events = session.receive(buffer[0..<n], rules: rulesBox.value)
            case .timedOut:
                events = []
            case .closed:
                logger.info("client closed the connection", ["accepted": "\(session.acceptedCount)"])
                return .close
            case .failed(let reason):
                logger.info("connection failed", ["reason": reason])
                return .close
            }
        }
        // An error response was written; whatever the client sends after it is discarded.
        return .lingeringClose
    }

    private func handle(_ event: BinaryGatewayEvent, connection: Int, client: APNsBinaryClientIdentity?,
                        stream: any BinaryByteStream, logger: Logger) {
        let now = Date()
        switch event {
        case .accepted(let notification):
            let item = Received(notification: notification, connection: connection, client: client, time: now)
            let hex = notification.tokenHex
            if uninstalled.withLock({ $0.contains(hex) }), let feedback = configuration.feedback {
                feedback.addDeadToken(notification.token, time: UInt32(clamping: Int(now.timeIntervalSince1970)))
            }
            let limit = configuration.retainLimit
            state.withLock { s in
                s.acceptedTotal += 1
                s.received.append(item)
                // Trimmed in chunks (amortised O(1) per notification, not a shift of the whole list each time).
                if let limit, s.received.count > 2 * max(limit, 0) + 64 { s.received.removeFirst(s.received.count - max(limit, 0)) }
            }
            logger.debug("notification accepted", ["command": "\(notification.command)", "token": Redact.token(hex),
                                                   "identifier": notification.identifier.map { "\($0)" } ?? "-"])
            guard let record = configuration.record else { return }
            let parsed = try? JSONValue.parse(Data(notification.payload))
            let isJSON = parsed?.objectValue != nil
            record.write { o in
                o.string("event", "notification")
                o.string("time", now.iso8601)
                o.int("connection", connection)
                o.int("command", Int(notification.command))
                o.int64("identifier", notification.identifier.map(Int64.init))
                o.int64("expiry", notification.expiry.map(Int64.init))
                o.int("priority", notification.priority.map(Int.init))
                o.string("token", hex)
                o.int("payloadBytes", notification.payload.count)
                o.bool("json", isJSON)
                if isJSON { o.value("payload", parsed) } else { o.string("payload", notification.payloadText) }
                o.client(client)
            }
        case .dropped(let discarded):
            state.withLock { $0.drops += 1 }
            rulesBox.withLock { r in
                guard let n = r.dropConnections else { return }
                r.dropConnections = n - 1
                if n <= 1 { r.dropAfter = nil }
            }
            logger.info("connection dropped (fault)", ["accepted": "\(rulesBox.value.dropAfter ?? 0)", "discardedBytes": "\(discarded)"])
            configuration.record?.write { o in
                o.string("event", "dropped")
                o.string("time", now.iso8601)
                o.int("connection", connection)
                o.int("discardedBytes", discarded)
            }
        case .rejected(let response, let frame, let discarded):
            let tokenHex = frame?.token.map { BinaryHex.encode($0) }
            let item = Rejection(response: response, connection: connection, command: frame?.command,
                                 tokenHex: tokenHex, discardedBytes: discarded, time: now)
            let failure = rulesBox.value.answersErrors ? stream.write(response.bytes) : "not sent (silent gateway)"
            state.withLock { $0.rejections.append(item) }
            logger.info("error response sent", ["status": "\(response.status.rawValue)", "identifier": "\(response.identifier)",
                                                "reason": response.reason, "discardedBytes": "\(discarded)",
                                                "writeError": failure ?? "-"])
            configuration.record?.write { o in
                o.string("event", "error")
                o.string("time", now.iso8601)
                o.int("connection", connection)
                o.int("status", Int(response.status.rawValue))
                o.string("statusName", response.status.name)
                o.int64("identifier", Int64(response.identifier))
                o.string("reason", response.reason)
                o.int("command", frame.map { Int($0.command) })
                o.string("token", tokenHex)
                o.int("discardedBytes", discarded)
            }
        }
    }
}
