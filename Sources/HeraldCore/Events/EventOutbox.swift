import FoundationEssentials
import Glibc

/// The durable event outbox a storage driver keeps (issue 38): events appended in the
/// transaction of the state change they report, read in order by the webhooks' senders and the
/// `GET /v1/events` feed, pruned after `events.retention`.
///
/// The drivers append delivery and device events themselves (inside ``DeliveryQueue/complete(_:now:)``,
/// ``TokenStore/invalidate(app:token:at:reason:)`` and ``TokenStore/unregister(app:token:)``);
/// ``append(_:)`` is for the events of no other write (a transport paused or resumed).
public protocol EventOutbox: Sendable {
    /// Appends events that report no stored change, in one transaction.
    func append(_ events: [EventRecord]) async throws

    /// Events after `sequence` (``EventRecord/sequence``), oldest first, at most `limit`.
    func events(after sequence: Int64, limit: Int) async throws -> [EventRecord]

    /// Takes, or renews, the lease of `webhook` for `node` until `until` (a lease held by another
    /// node is taken only once it ran out at `now`). Returns the webhook's cursor (the last
    /// sequence it acknowledged) when `node` holds the lease, `nil` when another node does. A
    /// webhook seen for the first time starts after the last stored event.
    func leaseWebhook(_ webhook: String, node: String, now: Date, until: Date) async throws -> Int64?

    /// Moves `webhook`'s cursor forward to `sequence`, only while `node` holds its lease;
    /// returns whether it did.
    func acknowledge(webhook: String, node: String, through sequence: Int64) async throws -> Bool

    /// Gives up `node`'s lease of `webhook` (the daemon stopping), so another node takes it at once.
    func releaseWebhook(_ webhook: String, node: String) async throws

    /// `webhook`'s cursor; `nil` when it never sent.
    func webhookCursor(_ webhook: String) async throws -> Int64?

    /// Deletes events created before `cutoff`; returns how many.
    func pruneEvents(createdBefore cutoff: Date) async throws -> Int

    /// Closes what ``StorageDriver/openEventOutbox(_:)`` opened (an outbox of ``OpenStorage`` closes with it).
    func close() async
}

/// Which events a reader wants: types or prefixes (`"delivery"`, `"device.retired"`) and apps.
public struct EventFilter: Sendable, Equatable {
    /// Types or prefixes; `nil`: every type.
    public var types: [String]?
    /// Apps; `nil`: every app (events of no app, a transport's, always pass).
    public var apps: [String]?

    public init(types: [String]? = nil, apps: [String]? = nil) {
        self.types = types
        self.apps = apps
    }

    /// Whether `event` passes.
    public func admits(_ event: EventRecord) -> Bool {
        if let types, !types.contains(where: { event.type == $0 || event.type.hasPrefix($0 + ".") }) { return false }
        if let apps, !event.app.isEmpty, !apps.contains(event.app) { return false }
        return true
    }
}

/// One page of events for a reader.
public struct EventPage: Sendable, Equatable {
    /// The events that passed the filter, in order.
    public var events: [EventRecord]
    /// The cursor after this page: the last event read, passed or not (unchanged when nothing was read).
    public var next: Int64

    public init(events: [EventRecord], next: Int64) {
        self.events = events
        self.next = next
    }

    /// Reads up to `limit` events after `cursor` that pass `filter`, looking at no more than
    /// `scan` stored events (so a filter that passes little costs a bounded read).
    public static func read(_ outbox: any EventOutbox, after cursor: Int64, limit: Int, filter: EventFilter,
                            scan: Int = 5000) async throws -> EventPage {
        var page = EventPage(events: [], next: cursor)
        var scanned = 0
        while page.events.count < limit, scanned < scan {
            let chunk = try await outbox.events(after: page.next, limit: min(1000, max(limit, 100)))
            if chunk.isEmpty { break }
            for e in chunk {
                scanned += 1
                if filter.admits(e) {
                    page.events.append(e)
                }
                page.next = e.sequence
                if page.events.count == limit { break }
            }
        }
        return page
    }
}
