import FoundationEssentials
import Glibc

/// Renders deliveries' payloads through their route's plugin, once per notification: the
/// queue returns deliveries unrendered (it stores the neutral content), and many deliveries
/// of a batch share a notification.
public final class PayloadRenderer: Sendable {
    private struct Entry {
        var notificationID: String
        var payload: RenderedPayload
    }

    private let configuration: any TransportConfiguration
    /// Recently rendered notifications, newest last (a broadcast's batches share one).
    private let recent = Locked<[Entry]>([])
    private let capacity: Int

    /// - Parameter capacity: notifications remembered (a batch rarely spans more than a few).
    public init(configuration: any TransportConfiguration, capacity: Int = 64) {
        self.configuration = configuration
        self.capacity = capacity
    }

    /// The payload of `delivery` on this route.
    /// - Throws: ``ContentProblem`` when the route cannot carry the content.
    public func payload(for delivery: Delivery) throws(ContentProblem) -> RenderedPayload {
        if let hit = recent.withLock({ $0.last(where: { $0.notificationID == delivery.notificationID })?.payload }) {
            return hit
        }
        let payload = try configuration.render(delivery.content, context: delivery.renderContext)
        recent.withLock { entries in
            entries.append(Entry(notificationID: delivery.notificationID, payload: payload))
            if entries.count > capacity { entries.removeFirst(entries.count - capacity) }
        }
        return payload
    }
}
