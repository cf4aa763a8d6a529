import Foundation
import HeraldCore
import HeraldEvents
import HeraldServer

/// A webhook receiver for tests, on 127.0.0.1 port 0: it checks the `Herald-Signature` of every
/// POST with each secret it knows, records the events, and answers as its script says.
public final class WebhookReceiver: Sendable {
    /// One POST as received.
    public struct Post: Sendable {
        public var path: String
        /// The events' ids, in the body's order.
        public var ids: [String]
        /// The events as JSON.
        public var events: [JSONValue]
        /// Per secret (in the order given to the receiver): whether the signature verified.
        public var verified: [Bool]
        public var webhookID: String?
        public var contentType: String?
    }

    /// How to answer the `n`th POST (0-based).
    private let answer: @Sendable (Int) async -> HTTPResponse
    private let secrets: [Secret]
    private let received = Locked<[Post]>([])
    private let server: HTTPServer
    /// The port it listens on.
    public let port: Int
    private let box: Locked<(@Sendable (HTTPRequest) async -> HTTPResponse)?>

    /// - Parameter answer: the answer to the `n`th POST (default: 200).
    public init(secrets: [Secret], answer: @escaping @Sendable (Int) async -> HTTPResponse = { _ in HTTPResponse(status: 200) }) throws {
        self.secrets = secrets
        self.answer = answer
        let box = Locked<(@Sendable (HTTPRequest) async -> HTTPResponse)?>(nil)
        self.box = box
        server = HTTPServer(options: HTTPServer.Options(), logger: .disabled, metrics: MetricsRegistry()) { request in
            guard let handle = box.withLock({ $0 }) else { return HTTPResponse(status: 503) }
            return await handle(request)
        }
        port = try server.start(ListenAddress(host: "127.0.0.1", port: 0))
        box.withLock { $0 = { [self] in await handle($0) } }
    }

    private func handle(_ request: HTTPRequest) async -> HTTPResponse {
        let json = try? JSONValue.parse(request.body)
        let events = json?["events"]?.arrayValue ?? []
        let header = request.headers["herald-signature"] ?? ""
        let post = Post(path: request.path, ids: events.compactMap { $0["id"]?.stringValue }, events: events,
                        verified: secrets.map { WebhookSignature.verify(header, body: request.body, secret: $0, now: Date()) },
                        webhookID: request.headers["herald-webhook-id"], contentType: request.headers["content-type"])
        let n = received.withLock { $0.append(post); return $0.count - 1 }
        return await answer(n)
    }

    /// Every POST so far, in arrival order.
    public var posts: [Post] { received.withLock { $0 } }

    /// Every event of every POST so far, in arrival order (repeats included).
    public var events: [JSONValue] { posts.flatMap(\.events) }

    public func stop() async { await server.stop(deadline: 1) }
}
