import FoundationEssentials
import HeraldCore

/// `GET /v1/events?after=&limit=&types=&app=` (admin scope): the event outbox as a feed, in order,
/// for a backend that cannot receive webhooks or catches up after an outage (issue 38).
extension API {
    /// The largest `limit`.
    static let maxEventsPerPage = 1000

    func events(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard let outbox = deps.events else {
            throw APIError.notFound("this storage driver keeps no event outbox")
        }
        var after: Int64 = 0
        if let text = request.query["after"], !text.isEmpty {
            guard let n = Int64(text), n >= 0 else { throw APIError.invalid("after", "expected the \"next\" of an earlier page (a number), or nothing to start at the oldest event") }
            after = n
        }
        var limit = 100
        if let text = request.query["limit"] {
            guard let n = Int(text), (1...Self.maxEventsPerPage).contains(n) else {
                throw APIError.invalid("limit", "expected a number from 1 to \(Self.maxEventsPerPage)")
            }
            limit = n
        }
        var types: [String]?
        if let text = request.query["types"], !text.isEmpty {
            let list = text.split(separator: ",").map { String($0).trimmingWhitespace() }
            if let bad = list.first(where: { !EventType.isSelector($0) }) {
                throw APIError.invalid("types", "unknown event type \"\(bad.prefix(64))\"; use types or prefixes such as delivery, device.retired, transport")
            }
            types = list
        }
        let app = request.query["app"].flatMap { $0.isEmpty ? nil : [$0] }
        let page = try await EventPage.read(outbox, after: after, limit: limit, filter: EventFilter(types: types, apps: app))
        return HTTPResponse.json(200, EventRecord.body(page.events, next: String(page.next)))
    }
}
