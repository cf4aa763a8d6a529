import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// A simulator of Apple's legacy feedback service (feedback.push.apple.com:2196), as a real server.
///
/// On each connection (TLS with a required client certificate, or plaintext) it sends every
/// current dead-token tuple — `[time u32][token length u16][token]`, big-endian — and closes.
/// The client sends nothing. The list empties once sent, as Apple's did ("cleared after you
/// read it"); if the write fails the entries are kept for the next connection.
public final class FeedbackSimulator: Sendable {
    /// One dead token and when APNs learned the app was gone (the protocol's tuple).
    public typealias Entry = APNsFeedbackTuple

    /// What one connection was sent.
    public struct Delivery: Sendable, Hashable {
        public var connection: Int
        public var client: APNsBinaryClientIdentity?
        public var entries: [Entry]
        public var time: Date
    }

    /// How to run the simulator.
    public struct Configuration: Sendable {
        /// Address to listen on (an IP literal). Default 127.0.0.1.
        public var host = "127.0.0.1"
        /// Port; 0 lets the kernel choose.
        public var port = 0
        /// TLS with client certificates; `nil` serves plaintext TCP.
        public var tls: APNsBinaryTLSFiles?
        /// Dead tokens listed from the start.
        public var deadTokens: [Entry] = []
        /// Where to append one JSON line per event.
        public var record: BinaryRecordSink?
        /// Seconds a client may take to finish the TLS handshake.
        public var handshakeTimeout: Double = 10
        public var logger: Logger = .disabled

        public init(host: String = "127.0.0.1", port: Int = 0, tls: APNsBinaryTLSFiles? = nil, deadTokens: [Entry] = []) {
            self.host = host
            self.port = port
            self.tls = tls
            self.deadTokens = deadTokens
        }
    }

    private struct State {
        var pending: [Entry] = []
        var deliveries: [Delivery] = []
        var refused: [String] = []
        var server: BinaryThreadedServer?
    }

    public let configuration: Configuration
    private let state: Locked<State>

    public init(configuration: Configuration) {
        self.configuration = configuration
        var initial = State()
        initial.pending = configuration.deadTokens
        self.state = Locked(initial)
    }

    /// Binds and starts serving. - Throws: ``BinarySimulatorError`` naming the address or file at fault.
    public func start() throws(BinarySimulatorError) {
        let server = try BinaryThreadedServer(
            host: configuration.host, port: configuration.port, tls: configuration.tls,
            handshakeTimeout: configuration.handshakeTimeout,
            refusal: { [self] connection, reason in refused(connection, reason) },
            handler: { [self] stream, connection in serve(stream, connection: connection) })
        state.withLock { $0.server = server }
        server.start(announcing: "feedback service listening", to: configuration.logger)
    }

    /// The bound port (0 before ``start()``).
    public var port: Int { state.withLock { $0.server?.listener.port ?? 0 } }

    /// Stops listening and waits for open connections to finish.
    public func stop() {
        let server = state.withLock { $0.server }
        server?.stop()
    }

    /// Adds a dead token (hex) reported at `time`. - Throws: if `hex` is not an even run of hex digits.
    public func addDeadToken(_ hex: String, time: Date = Date()) throws(BinarySimulatorError) {
        guard let bytes = BinaryHex.decode(hex), !bytes.isEmpty else {
            throw BinarySimulatorError("dead token \"\(Redact.token(hex))\" is not hex")
        }
        addDeadToken(bytes, time: UInt32(clamping: Int(time.timeIntervalSince1970)))
    }

    /// Adds a dead token reported at `time` (UNIX seconds).
    public func addDeadToken(_ token: [UInt8], time: UInt32) {
        state.withLock { $0.pending.append(Entry(token: token, time: time)) }
    }

    /// Tuples the next connection will receive.
    public var pending: [Entry] { state.withLock { $0.pending } }
    /// What each connection was sent, in order.
    public var deliveries: [Delivery] { state.withLock { $0.deliveries } }
    /// Clients refused at the TLS handshake, with the reason.
    public var refusedHandshakes: [String] { state.withLock { $0.refused } }

    /// Waits until at least `count` connections were served; `false` on timeout.
    public func waitForDeliveries(count: Int, timeout: Double = 10) async -> Bool {
        await SimulatorWait.until(timeout: timeout, every: 5_000_000) { state.withLock { $0.deliveries.count } >= count }
    }

    /// Waits until at least `count` clients were refused at the handshake; `false` on timeout.
    public func waitForRefusals(count: Int, timeout: Double = 10) async -> Bool {
        await SimulatorWait.until(timeout: timeout, every: 5_000_000) { state.withLock { $0.refused.count } >= count }
    }

    private func refused(_ connection: Int, _ reason: String) {
        state.withLock { $0.refused.append(reason) }
        configuration.logger.info("feedback client refused at handshake", ["connection": "\(connection)", "reason": reason])
        configuration.record?.write { o in
            o.string("event", "feedback-refused")
            o.string("time", Date().iso8601)
            o.int("connection", connection)
            o.string("reason", reason)
        }
    }

    private func serve(_ stream: any BinaryByteStream, connection: Int) -> BinaryConnectionEnd {
        let entries = state.withLock { s in
            let taken = s.pending
            s.pending = []
            return taken
        }
        var bytes: [UInt8] = []
        for entry in entries { bytes += entry.bytes }
        if let failure = bytes.isEmpty ? nil : stream.write(bytes) {
            // Not delivered: keep them, ahead of any added since.
            state.withLock { $0.pending.insert(contentsOf: entries, at: 0) }
            configuration.logger.info("feedback write failed; entries kept", ["connection": "\(connection)", "reason": failure])
            return .close
        }
        let now = Date()
        state.withLock { $0.deliveries.append(Delivery(connection: connection, client: stream.client, entries: entries, time: now)) }
        configuration.logger.info("feedback sent", ["connection": "\(connection)", "tuples": "\(entries.count)"])
        configuration.record?.write { o in
            o.string("event", "feedback")
            o.string("time", now.iso8601)
            o.int("connection", connection)
            o.array("tokens") { w in
                for (i, e) in entries.enumerated() {
                    if i > 0 { w.raw(UInt8(ascii: ",")) }
                    w.object { t in
                        t.string("token", e.tokenHex)
                        t.int64("time", Int64(e.time))
                    }
                }
            }
            o.client(stream.client)
        }
        return .lingeringClose
    }
}
