import Foundation
import HeraldAPNs
import HeraldCore

/// A transport for tests: answers each delivery from a script and records every call.
public final class ScriptedTransport: Transport, Sendable {
    /// A route for tests that takes any device and renders the neutral content (the core's default).
    public struct Configuration: TransportConfiguration {
        public var summary: String { "scripted" }
        public init() {}
    }

    /// One call to ``deliver(_:)``.
    public struct Call: Sendable {
        public var time: Date
        public var deliveries: [Delivery]
    }

    public let name: String
    public let preferredBatchSize: Int
    private let clock: any WallClock
    private let script: @Sendable (Delivery) -> DeliveryOutcome
    private let recorded = Locked<[Call]>([])

    /// - Parameter script: the outcome for a delivery (look at `attempt` to vary by attempt).
    public init(name: String, clock: any WallClock, batchSize: Int = 500,
                script: @escaping @Sendable (Delivery) -> DeliveryOutcome = { .delivered(receipt: $0.messageID.uuidString.lowercased()) }) {
        self.name = name
        self.clock = clock
        self.preferredBatchSize = batchSize
        self.script = script
    }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        let now = clock.now
        recorded.withLock { $0.append(Call(time: now, deliveries: batch)) }
        return batch.map(script)
    }

    /// Every call so far.
    public var calls: [Call] { recorded.withLock { $0 } }

    /// Every delivery attempt so far, in order, with the clock time it was sent.
    public var attempts: [(time: Date, delivery: Delivery)] {
        calls.flatMap { call in call.deliveries.map { (call.time, $0) } }
    }
}

/// A log handler that keeps records in memory, for asserting what was (not) logged.
public final class RecordingLogHandler: LogHandler, Sendable {
    private let storage = Locked<[LogRecord]>([])
    public init() {}
    public func emit(_ record: LogRecord) { storage.withLock { $0.append(record) } }
    public var records: [LogRecord] { storage.withLock { $0 } }
    /// Every record rendered as a logfmt line.
    public var text: String { records.map { LogFormat.logfmt.render($0) }.joined() }
}
