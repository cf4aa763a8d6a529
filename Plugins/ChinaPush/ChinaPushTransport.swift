import FoundationEssentials
import HeraldCore

/// What every China-vendor transport does the same way: its vendor's connections opened on
/// `start` and closed on `shutdown`, deliveries through the shared loop (``ChinaPushEngine``) in
/// batches of the vendor's size, and the loop's impairment (a quota or refused credentials) for
/// `/readyz`. A vendor's transport adds its configuration, its vendor and its `herald check` lines.
public protocol ChinaPushTransport: TransportPlugin {
    /// The shared delivery loop over this transport's vendor.
    var engine: ChinaPushEngine { get }
    /// How long `shutdown` waits for in-flight requests (the connection's timeout).
    var stopDeadline: TimeInterval { get }
}

extension ChinaPushTransport {
    public var preferredBatchSize: Int { engine.vendor.maxBatch }

    public func start() async throws {
        do { try engine.vendor.start() } catch { throw TransportError(transport: name, message: error.description) }
    }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] { await engine.deliver(batch) }

    public var impairment: String? { engine.impairment }

    public func shutdown() async {
        await engine.stop()
        await engine.vendor.stop(deadline: stopDeadline)
    }
}
