import APNsBinaryProtocol
/// What a connection did with the bytes it was given.
enum BinaryGatewayEvent: Sendable, Equatable {
    /// A notification passed every rule.
    case accepted(APNsBinaryNotification)
    /// The gateway writes `response.bytes` and closes. `frame` is the offending notification when
    /// it could be cut from the stream; `discardedBytes` counts bytes already received after it.
    case rejected(APNsBinaryErrorResponse, frame: BinaryParsedFrame?, discardedBytes: Int)
    /// The gateway drops the connection without a word (``APNsBinaryRules/dropAfter``);
    /// `discardedBytes` were received and never processed.
    case dropped(discardedBytes: Int)
}

/// One gateway connection's protocol state: pure, no I/O, tested directly.
///
/// Feed received bytes to ``receive(_:rules:)``; it returns each accepted notification and, at
/// most once, a rejection. After a rejection the session is finished and ignores everything
/// (Apple discarded all notifications after the failed one on that connection).
struct BinaryGatewaySession: Sendable {
    private var parser = BinaryFrameParser()
    let client: APNsBinaryClientIdentity?
    /// Notifications accepted on this connection.
    private(set) var acceptedCount = 0
    /// Identifier of the last accepted notification (0 if none, or it had none).
    private(set) var lastAcceptedIdentifier: UInt32 = 0
    /// Whether an error response has been produced; the connection must close.
    private(set) var isFinished = false
    /// Bytes received after the failed notification and thrown away.
    private(set) var discardedBytes = 0

    init(client: APNsBinaryClientIdentity?) {
        self.client = client
    }

    /// Call once when the connection is established: a `shutdownAfter` of 0 shuts it down at once.
    mutating func begin(rules: APNsBinaryRules) -> [BinaryGatewayEvent] {
        guard !isFinished, let limit = rules.shutdownAfter, acceptedCount >= limit else { return [] }
        return [shutdown(limit: limit)]
    }

    mutating func receive(_ bytes: some Collection<UInt8>, rules: APNsBinaryRules) -> [BinaryGatewayEvent] {
        if isFinished {
            discardedBytes += bytes.count
            return []
        }
        parser.append(bytes)
        var events: [BinaryGatewayEvent] = []
        while !isFinished, let frame = parser.next() {
            if let limit = rules.shutdownAfter, acceptedCount >= limit {
                // Shutdown was lowered while connected: this frame is the first one discarded.
                discardedBytes = frame.wireLength
                events.append(shutdown(limit: limit))
                break
            }
            switch BinaryValidator.check(frame, client: client, rules: rules) {
            case .accept(let notification):
                acceptedCount += 1
                lastAcceptedIdentifier = notification.identifier ?? 0
                events.append(.accepted(notification))
                if let limit = rules.shutdownAfter, acceptedCount >= limit {
                    events.append(shutdown(limit: limit))
                } else if let limit = rules.dropAfter, acceptedCount >= limit {
                    isFinished = true
                    discardedBytes += parser.bufferedCount
                    events.append(.dropped(discardedBytes: discardedBytes))
                }
            case .reject(let response):
                isFinished = true
                discardedBytes += parser.bufferedCount
                events.append(.rejected(response, frame: frame, discardedBytes: discardedBytes))
            }
        }
        return events
    }

    private mutating func shutdown(limit: Int) -> BinaryGatewayEvent {
        isFinished = true
        discardedBytes += parser.bufferedCount
        let response = APNsBinaryErrorResponse(
            status: .shutdown, identifier: lastAcceptedIdentifier,
            reason: "shutdown after \(limit) notification\(limit == 1 ? "" : "s") on this connection; identifier is the last accepted one")
        return .rejected(response, frame: nil, discardedBytes: discardedBytes)
    }
}
