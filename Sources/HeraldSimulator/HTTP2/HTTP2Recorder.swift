import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// A notification the HTTP/2 simulator accepted (answered 200).
public struct ReceivedNotification: Sendable {
    /// One request header as received.
    public struct Header: Sendable, Equatable {
        /// Lower case, as HTTP/2 sends it.
        public var name: String
        /// The value as sent.
        public var value: String
    }

    /// When it was accepted (the simulator's clock).
    public var time: Date
    /// Which connection it came on (1, 2, … in accept order).
    public var connectionID: Int
    /// Its HTTP/2 stream id.
    public var streamID: Int
    /// The device token from the path, as sent.
    public var deviceToken: String
    /// `apns-topic`, or the certificate's topic when the header was absent.
    public var topic: String
    /// `apns-push-type`, or the type the topic's suffix implies, else `alert`.
    public var pushType: PushType
    /// The `apns-id` answered (the request's, else a new one).
    public var apnsID: String
    /// The `apns-unique-id` answered (sandbox only).
    public var uniqueID: String?
    /// Every request header (pseudo-headers included) in arrival order; `authorization` values
    /// are replaced by `<redacted>`.
    public var headers: [Header]
    /// The body.
    public var payload: [UInt8]
    /// The provider token's key id (token auth).
    public var keyID: String?
    /// The provider token's team (token auth).
    public var teamID: String?
    /// The provider token's `iat` (token auth): tells tokens apart without keeping them.
    public var tokenIssuedAt: Date? = nil

    /// The first value of header `name` (lower case).
    public func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
    /// `apns-priority` as a number, if sent.
    public var priority: Int? { header("apns-priority").flatMap { Int($0) } }
    /// `apns-expiration` as a number, if sent.
    public var expiration: Int64? { header("apns-expiration").flatMap { Int64($0) } }
    /// `apns-collapse-id`, if sent.
    public var collapseID: String? { header("apns-collapse-id") }
    /// The body as text.
    public var payloadString: String { String(decoding: payload, as: UTF8.self) }
    /// The body parsed as JSON (`nil` if it is not JSON).
    public var payloadJSON: JSONValue? { try? JSONValue.parse(Data(payload)) }

    /// One JSON Lines record.
    var jsonLine: [UInt8] {
        var w = JSONWriter(capacity: 512 + payload.count)
        w.object { o in
            o.string("time", time.iso8601)
            o.int("connection", connectionID)
            o.int("stream", streamID)
            o.string("token", deviceToken)
            o.string("topic", topic)
            o.string("pushType", pushType.rawValue)
            o.string("apnsId", apnsID)
            o.string("uniqueId", uniqueID)
            o.int("priority", priority)
            o.int64("expiration", expiration)
            o.string("collapseId", collapseID)
            o.string("keyId", keyID)
            o.string("teamId", teamID)
            o.int64("tokenIssuedAt", tokenIssuedAt.map { Int64($0.timeIntervalSince1970) })
            o.object("headers") { h in
                for header in headers where !header.name.hasPrefix(":") { h.string(header.name, header.value) }
            }
            if payloadJSON != nil {
                o.rawJSON("payload", payload)
            } else {
                o.string("payload", payloadString)
            }
        }
        w.raw(UInt8(ascii: "\n"))
        return w.bytes
    }
}

/// What the HTTP/2 simulator has seen so far.
public struct HTTP2SimulatorCounters: Sendable, Equatable {
    /// Connections accepted (TCP).
    public var connections = 0
    /// Requests answered (requests a GOAWAY or close fault leaves unanswered are not counted).
    public var requests = 0
    /// Requests answered 200.
    public var accepted = 0
    /// Requests refused, by `reason`.
    public var rejected: [String: Int] = [:]
    /// GOAWAY frames sent by the `goAwayAfterStreams` fault.
    public var goAways = 0
    /// Connections closed by the `closeAfterStreams` fault.
    public var abruptCloses = 0
    /// Streams reset instead of answered (the `resetTokens` fault).
    public var resetStreams = 0
    /// Requests left without an answer (the `unansweredTokens` fault).
    public var unansweredStreams = 0

    /// All refused requests.
    public var rejectedTotal: Int { rejected.values.reduce(0, +) }

    /// One line: `connections 1, requests 5, accepted 4, rejected 1 (BadDeviceToken 1)`.
    public var summary: String {
        var text = "connections \(connections), requests \(requests), accepted \(accepted), rejected \(rejectedTotal)"
        if !rejected.isEmpty {
            text += " (" + rejected.keys.sorted().map { "\($0) \(rejected[$0]!)" }.joined(separator: ", ") + ")"
        }
        if goAways > 0 { text += ", GOAWAY \(goAways)" }
        if abruptCloses > 0 { text += ", closed abruptly \(abruptCloses)" }
        if resetStreams > 0 { text += ", streams reset \(resetStreams)" }
        if unansweredStreams > 0 { text += ", left unanswered \(unansweredStreams)" }
        return text
    }
}

/// Counters, the in-memory list and the JSONL file; shared by every connection thread.
final class HTTP2Recorder: Sendable {
    private struct State {
        var connections = 0
        var requests = 0
        var accepted = 0
        var rejected = [Int](repeating: 0, count: APNsHTTP2Reason.allCases.count)
        var goAways = 0
        var abruptCloses = 0
        var resetStreams = 0
        var unansweredStreams = 0
        var received: [ReceivedNotification] = []
        var pending: [UInt8] = []
    }

    private let state = Locked(State())
    /// The JSONL file (appended), if any.
    private let file: RecordFile?
    let retains: Bool
    /// Whether accepted notifications must be turned into ``ReceivedNotification`` values.
    var wantsNotifications: Bool { retains || file != nil }

    init(recordFile: String?, retains: Bool) throws(HTTP2SimulatorError) {
        self.retains = retains
        guard let recordFile else {
            file = nil
            return
        }
        do {
            file = try RecordFile(path: recordFile, truncate: false)
        } catch {
            throw HTTP2SimulatorError(error)
        }
    }

    func connectionOpened() { state.withLock { $0.connections += 1 } }
    func goAwaySent() { state.withLock { $0.goAways += 1 } }
    func closedAbruptly() { state.withLock { $0.abruptCloses += 1 } }
    func streamReset() { state.withLock { $0.resetStreams += 1 } }
    func leftUnanswered() { state.withLock { $0.unansweredStreams += 1 } }

    /// Counts one answered request; `notification` is the accepted one (when wanted).
    func answered(_ reason: APNsHTTP2Reason?, notification: ReceivedNotification?) {
        let line = file != nil ? notification?.jsonLine : nil
        state.withLock { s in
            s.requests += 1
            if let reason {
                s.rejected[reason.index] += 1
            } else {
                s.accepted += 1
                if retains, let notification { s.received.append(notification) }
                if let line { s.pending.append(contentsOf: line) }
            }
        }
    }

    /// Writes buffered JSONL records to the file.
    func flush() {
        guard let file else { return }
        state.withLock { s in
            guard !s.pending.isEmpty else { return }
            file.write(s.pending)
            s.pending.removeAll(keepingCapacity: true)
        }
    }

    var received: [ReceivedNotification] { state.withLock { $0.received } }
    func clearReceived() { state.withLock { $0.received.removeAll() } }

    var counters: HTTP2SimulatorCounters {
        state.withLock { s in
            var c = HTTP2SimulatorCounters()
            c.connections = s.connections
            c.requests = s.requests
            c.accepted = s.accepted
            c.goAways = s.goAways
            c.abruptCloses = s.abruptCloses
            c.resetStreams = s.resetStreams
            c.unansweredStreams = s.unansweredStreams
            for (i, n) in s.rejected.enumerated() where n > 0 { c.rejected[APNsHTTP2Reason.indexed[i].rawValue] = n }
            return c
        }
    }
}
