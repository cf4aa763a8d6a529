import APNsBinaryProtocol
/// What the binary gateway checks, and which faults it injects.
///
/// A value: the simulator keeps the current one behind a lock and each connection reads it
/// afresh for every notification, so faults set while a client is connected apply at once.
/// Defaults follow Apple's documentation; every choice Apple left open is noted on its property.
public struct APNsBinaryRules: Sendable, Hashable {
    /// Payload limit for commands 0 and 1, in bytes: 2048 since iOS 8, as for command 2 (256
    /// before). Larger → status 7.
    public var legacyPayloadLimit = 2048
    /// Payload limit for command 2, in bytes (Apple: "less than or equal to 2 kilobytes"). Larger → status 7.
    public var framePayloadLimit = 2048
    /// Largest token accepted in a command-2 frame. Tokens were 32 bytes in the binary API's
    /// lifetime and the default is 32 (so any other size → status 5); Apple's last revision
    /// allowed "up to 100 bytes" — raise this to accept 32 through that size. Commands 0 and 1
    /// always require exactly 32.
    public var maximumFrameTokenSize = 32
    /// Longest topic (the client certificate's UID) accepted, in UTF-8 bytes; longer → status 6.
    /// Apple published no figure; 255 is the simulator's choice.
    public var maximumTopicSize = 255
    /// Whether a TLS client whose certificate names no topic (no UID, no topics extension) gets
    /// status 3 on its first notification. Ignored on plaintext connections, which have no certificate.
    public var requireTopic = true
    /// The status for bytes that do not follow the format: an unknown command or item id, a
    /// fixed-size item of the wrong size, a repeated item, items overrunning their frame, a
    /// priority other than 5 or 10. Default 128, Apple's "Protocol error (APNs could not parse
    /// the notification)" from its last revision; set 255 (unknown) to mimic the older tables.
    public var protocolErrorStatus = APNsBinaryStatus.protocolError
    /// Tokens (lower-case hex) the gateway rejects with status 8, invalid token.
    public var invalidTokens: Set<String> = []
    /// Tokens (lower-case hex) rejected with any status of your choice (a fault, e.g. 1 or 255).
    /// Checked after every validation rule, so the notification must otherwise be valid.
    public var tokenFaults: [String: APNsBinaryStatus] = [:]
    /// After this many accepted notifications on one connection, the gateway sends status 10
    /// (shutdown) with the identifier of the last accepted one and closes; counted per connection.
    /// `0` sends the shutdown as soon as a client connects, with identifier 0.
    public var shutdownAfter: Int? = nil
    /// After this many accepted notifications on one connection, the gateway drops the
    /// connection: no error response, unread input discarded (a network failure or a crashed
    /// gateway); counted per connection. Checked after ``shutdownAfter``.
    public var dropAfter: Int? = nil
    /// How many connections ``dropAfter`` drops before it turns itself off; `nil`: every one.
    public var dropConnections: Int? = nil
    /// `false` makes a silent gateway: where it would send an error response it sends nothing,
    /// keeps the connection open and discards all further input until the client closes (a
    /// peer that hangs). Accepted notifications before it still count.
    public var answersErrors = true

    public init() {}
}

/// The identity a client proved with its TLS certificate (the binary API's only source of topic).
public struct APNsBinaryClientIdentity: Sendable, Hashable {
    /// The subject, one line (`UID=com.example.app, CN=Apple Push Services: …`).
    public var subject: String
    /// The subject's UID attribute: the bundle ID on Apple's push certificates.
    public var uid: String?
    /// Topics from Apple's extension 1.2.840.113635.100.6.3.6, if present.
    public var topics: [String]

    public init(subject: String, uid: String?, topics: [String]) {
        self.subject = subject
        self.uid = uid
        self.topics = topics
    }

    /// The topic notifications on this connection go to: the UID, else the first listed topic.
    public var topic: String? {
        if let uid, !uid.isEmpty { return uid }
        return topics.first { !$0.isEmpty }
    }
}

/// The validator's decision on one notification.
enum BinaryVerdict: Sendable, Equatable {
    case accept(APNsBinaryNotification)
    case reject(APNsBinaryErrorResponse)
}

/// Applies ``APNsBinaryRules`` to one parsed frame.
enum BinaryValidator {
    static let legacyTokenSize = 32

    /// The accepted notification, or the error response to send.
    static func check(_ frame: BinaryParsedFrame, client: APNsBinaryClientIdentity?,
                      rules: APNsBinaryRules) -> BinaryVerdict {
        let id = frame.identifier ?? 0
        func reject(_ status: APNsBinaryStatus, _ reason: String) -> BinaryVerdict {
            .reject(APNsBinaryErrorResponse(status: status, identifier: id, reason: reason))
        }
        if let problem = frame.malformed { return reject(rules.protocolErrorStatus, problem) }
        if let p = frame.priority, p != 10, p != 5 {
            return reject(rules.protocolErrorStatus, "priority \(p) is not 10 (immediate) or 5 (power-conserving)")
        }
        let legacy = frame.command != 2
        guard let token = frame.token else { return reject(.missingDeviceToken, "the frame has no item 1 (device token)") }
        if token.isEmpty { return reject(.missingDeviceToken, "the device token is empty (length 0)") }
        if legacy {
            if token.count != legacyTokenSize {
                return reject(.invalidTokenSize, "token is \(token.count) bytes; command \(frame.command) requires \(legacyTokenSize)")
            }
        } else if token.count < legacyTokenSize || token.count > max(rules.maximumFrameTokenSize, legacyTokenSize) {
            let allowed = rules.maximumFrameTokenSize > legacyTokenSize ? "\(legacyTokenSize)–\(rules.maximumFrameTokenSize)" : "\(legacyTokenSize)"
            return reject(.invalidTokenSize, "token is \(token.count) bytes; expected \(allowed)")
        }
        guard let payload = frame.payload else { return reject(.missingPayload, "the frame has no item 2 (payload)") }
        if payload.isEmpty { return reject(.missingPayload, "the payload is empty (length 0)") }
        let limit = legacy ? rules.legacyPayloadLimit : rules.framePayloadLimit
        if payload.count > limit {
            return reject(.invalidPayloadSize, "payload is \(payload.count) bytes; command \(frame.command) allows at most \(limit)")
        }
        if let client {
            guard let topic = client.topic else {
                if rules.requireTopic {
                    return reject(.missingTopic, "the client certificate (\(client.subject)) names no topic: no UID and no topics extension")
                }
                return accept(frame, token: token, payload: payload, rules: rules)
            }
            if topic.utf8.count > rules.maximumTopicSize {
                return reject(.invalidTopicSize, "topic \"\(topic)\" is \(topic.utf8.count) bytes; at most \(rules.maximumTopicSize)")
            }
        }
        return accept(frame, token: token, payload: payload, rules: rules)
    }

    private static func accept(_ frame: BinaryParsedFrame, token: [UInt8], payload: [UInt8],
                               rules: APNsBinaryRules) -> BinaryVerdict {
        let notification = APNsBinaryNotification(command: frame.command, identifier: frame.identifier,
                                                  expiry: frame.expiry, priority: frame.priority,
                                                  token: token, payload: payload)
        let hex = notification.tokenHex
        let id = frame.identifier ?? 0
        if rules.invalidTokens.contains(hex) {
            return .reject(APNsBinaryErrorResponse(status: .invalidToken, identifier: id,
                                                    reason: "token \(hex.prefix(8))… is configured as invalid"))
        }
        if let status = rules.tokenFaults[hex] {
            return .reject(APNsBinaryErrorResponse(status: status, identifier: id,
                                                    reason: "fault injected for token \(hex.prefix(8))…: status \(status)"))
        }
        return .accept(notification)
    }
}
