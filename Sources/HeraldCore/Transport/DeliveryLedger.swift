/// A transport that can tell, after a crash, which deliveries it already accepted.
///
/// The daemon records a delivery as `sent` before handing it to a transport and records the
/// outcome after. A crash between the two leaves the delivery ambiguous. On restart the daemon
/// asks a transport that adopts this protocol which of those `apns-id`s it accepted, records
/// them as delivered and sends only the others again: exactly once. Transports without a
/// ledger (APNs keeps none) get the ambiguous deliveries again with the same `apns-id`:
/// at least once.
public protocol DeliveryLedger: Transport {
    /// The `apns-id`s (lower-case UUIDs) among `apnsIDs` that this transport has accepted.
    /// Called after ``Transport/start()`` and before the first ``Transport/deliver(_:)``.
    func acceptedDeliveries(among apnsIDs: Set<String>) async throws -> Set<String>
}
