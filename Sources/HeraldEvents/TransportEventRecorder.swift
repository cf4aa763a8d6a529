import FoundationEssentials
import Glibc
import HeraldCore

/// Turns transport workers' status changes into `transport.paused` and `transport.resumed`
/// events, appended to the outbox by one task it owns (a worker's status callback cannot wait
/// for the database). Stopped with ``stop()``, after which changes are dropped.
public final class TransportEventRecorder: Sendable {
    private let continuation: AsyncStream<EventRecord>.Continuation
    private let task: Task<Void, Never>
    private let paused = Locked<[String: Bool]>([:])
    private let clock: any WallClock

    public init(outbox: any EventOutbox, clock: any WallClock, logger: Logger) {
        let (stream, continuation) = AsyncStream.makeStream(of: EventRecord.self)
        self.continuation = continuation
        self.clock = clock
        task = Task {
            for await event in stream {
                do { try await outbox.append([event]) } catch {
                    logger.error("cannot record a transport event", ["type": event.type, "error": "\(error)"])
                }
            }
        }
    }

    /// A worker of `transport` moved to `status`: an event when it paused, or when it works again after a pause.
    public func statusChanged(transport: String, _ status: TransportWorker.Status) {
        let event: EventRecord? = paused.withLock { p in
            let was = p[transport] ?? false
            switch status {
            case .paused(let reason) where !was:
                p[transport] = true
                return .transport(transport, paused: true, reason: reason, now: clock.now)
            case .started where was:
                p[transport] = false
                return .transport(transport, paused: false, reason: "the transport works again", now: clock.now)
            case .stopped:
                p[transport] = false
                return nil
            default:
                return nil
            }
        }
        if let event { continuation.yield(event) }
    }

    /// Appends what is queued and ends the task.
    public func stop() async {
        continuation.finish()
        await task.value
    }
}
