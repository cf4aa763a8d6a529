/// A status code in the binary provider API's 6-byte error response (`[8][status][identifier]`).
///
/// Values and meanings are Apple's (Binary Provider API, table A-4). Unknown values keep their
/// raw byte, so a fault can inject any status.
public struct APNsBinaryStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The status byte.
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// 0: no errors encountered (never sent by the simulator).
    public static let noErrors = APNsBinaryStatus(rawValue: 0)
    /// 1: processing error.
    public static let processingError = APNsBinaryStatus(rawValue: 1)
    /// 2: missing device token.
    public static let missingDeviceToken = APNsBinaryStatus(rawValue: 2)
    /// 3: missing topic (the client certificate names no topic).
    public static let missingTopic = APNsBinaryStatus(rawValue: 3)
    /// 4: missing payload.
    public static let missingPayload = APNsBinaryStatus(rawValue: 4)
    /// 5: invalid token size.
    public static let invalidTokenSize = APNsBinaryStatus(rawValue: 5)
    /// 6: invalid topic size.
    public static let invalidTopicSize = APNsBinaryStatus(rawValue: 6)
    /// 7: invalid payload size.
    public static let invalidPayloadSize = APNsBinaryStatus(rawValue: 7)
    /// 8: invalid token.
    public static let invalidToken = APNsBinaryStatus(rawValue: 8)
    /// 10: shutdown; the identifier is the last notification accepted on the connection.
    public static let shutdown = APNsBinaryStatus(rawValue: 10)
    /// 128: protocol error (APNs could not parse the notification); in Apple's later revision only.
    public static let protocolError = APNsBinaryStatus(rawValue: 128)
    /// 255: none (unknown).
    public static let unknown = APNsBinaryStatus(rawValue: 255)

    /// Apple's name for the status.
    public var name: String {
        switch rawValue {
        case 0: return "No errors encountered"
        case 1: return "Processing error"
        case 2: return "Missing device token"
        case 3: return "Missing topic"
        case 4: return "Missing payload"
        case 5: return "Invalid token size"
        case 6: return "Invalid topic size"
        case 7: return "Invalid payload size"
        case 8: return "Invalid token"
        case 10: return "Shutdown"
        case 128: return "Protocol error"
        case 255: return "None (unknown)"
        default: return "Status \(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(name))" }
}

/// The 6-byte error response the gateway writes before it closes a connection.
public struct APNsBinaryErrorResponse: Sendable, Hashable {
    /// The command byte of every error response.
    public static let command: UInt8 = 8

    /// What went wrong.
    public var status: APNsBinaryStatus
    /// The identifier of the failed notification (for status 10, of the last accepted one);
    /// 0 when the notification carried none.
    public var identifier: UInt32
    /// Why, in words (the simulator's own explanation; not sent on the wire).
    public var reason: String

    public init(status: APNsBinaryStatus, identifier: UInt32, reason: String) {
        self.status = status
        self.identifier = identifier
        self.reason = reason
    }

    /// Reads a response off the wire: exactly 6 bytes starting with command 8, else `nil`.
    /// The ``reason`` is the status's name (the wire carries none).
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 6 else { return nil }
        let b = Array(bytes)
        guard b[0] == Self.command else { return nil }
        let id = UInt32(b[2]) << 24 | UInt32(b[3]) << 16 | UInt32(b[4]) << 8 | UInt32(b[5])
        self.init(status: APNsBinaryStatus(rawValue: b[1]), identifier: id, reason: APNsBinaryStatus(rawValue: b[1]).name)
    }

    /// The bytes on the wire: command 8, the status, the identifier big-endian.
    public var bytes: [UInt8] {
        [Self.command, status.rawValue,
         UInt8(truncatingIfNeeded: identifier >> 24), UInt8(truncatingIfNeeded: identifier >> 16),
         UInt8(truncatingIfNeeded: identifier >> 8), UInt8(truncatingIfNeeded: identifier)]
    }
}
