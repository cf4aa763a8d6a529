import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app side of Herald's foreground delivery: holds the device's live stream
/// (`GET /v1/stream?app=A&ack=1`) while the app is in the foreground, acknowledges what it reads
/// (`POST /v1/stream/ack`), reconnects with `Last-Event-ID` after a drop, and hands each
/// notification once to ``notifications()``, whichever way (stream or push) it came first.
///
/// ```swift
/// let herald = HeraldClient(configuration: .init(server: URL(string: "https://push.example.com")!, app: "com.example.app"),
///                           store: UserDefaultsClientStore(app: "com.example.app"),
///                           tokenProvider: { try await backend.heraldClientToken() })
/// herald.connect()                        // scene became active
/// for await n in herald.notifications() { … }
/// await herald.disconnect()               // scene left the foreground: the socket closes at once
/// ```
///
/// - Important: ``notifications()`` has one consumer at a time; what arrives while nobody
///   iterates is kept for the next call.
public final class HeraldClient: Sendable {
    /// The custom key under which a push from Herald carries the Herald notification id
    /// (`"herald_id"`), and under which a local notification's `userInfo` carries it.
    public static let notificationIDKey = "herald_id"

    /// Where and how to connect.
    public struct Configuration: Sendable {
        /// Herald's base URL (`https://push.example.com`, or with a path prefix behind a proxy).
        public var server: URL
        /// The app id (a key of `apps` in Herald's config).
        public var app: String
        /// Backoff between reconnections.
        public var reconnect: ReconnectPolicy
        /// The longest silence on the stream before it counts as dead and is reopened. Herald
        /// writes a heartbeat every `api.streams.heartbeat` (15 s by default). Default 45 s.
        public var idleTimeout: Duration
        /// Timeout of each acknowledgement request (also how long ``disconnect()`` waits for
        /// the last one). Default 5 s.
        public var requestTimeout: Duration
        /// How many notification ids are remembered for de-duplication. Default 1,000.
        public var recentIDLimit: Int
        /// The push payload key holding the Herald id. Default ``HeraldClient/notificationIDKey``.
        public var notificationIDKey: String

        /// Creates a configuration.
        public init(server: URL, app: String, reconnect: ReconnectPolicy = ReconnectPolicy(), idleTimeout: Duration = .seconds(45),
                    requestTimeout: Duration = .seconds(5), recentIDLimit: Int = 1000,
                    notificationIDKey: String = HeraldClient.notificationIDKey) {
            self.server = server
            self.app = app
            self.reconnect = reconnect
            self.idleTimeout = idleTimeout
            self.requestTimeout = requestTimeout
            self.recentIDLimit = recentIDLimit
            self.notificationIDKey = notificationIDKey
        }
    }

    /// Where the connection stands.
    public enum Status: Sendable, Equatable {
        /// Not connecting (before ``connect()``, after ``disconnect()``).
        case idle
        /// Opening the stream; `attempt` counts the failures since the last connection that worked.
        case connecting(attempt: Int)
        /// The stream is open.
        case connected
        /// Waiting `delay` before reconnecting.
        case waiting(attempt: Int, delay: Duration)
    }

    /// What happened, for logs and tests (``init(configuration:store:tokenProvider:onEvent:random:sleep:)``'s
    /// `onEvent`). Called on the client's tasks: keep the handler quick.
    public enum Event: Sendable {
        case connecting(attempt: Int)
        /// The stream answered 200; `lastEventID` is what was sent as `Last-Event-ID`.
        case connected(lastEventID: String?)
        /// The connection ended (`nil`: the server ended the stream cleanly, e.g. it is stopping).
        case dropped(HeraldClientError?)
        case waiting(attempt: Int, delay: Duration)
        /// A notification went to ``HeraldClient/notifications()``.
        case received(HeraldNotification)
        /// A notification already shown (through the stream or a push) was dropped.
        case duplicate(notificationID: String, eventID: Int64?)
        /// An event that is not a notification was skipped (it is still acknowledged).
        case invalidEvent(HeraldClientError)
        /// Herald confirmed everything up to `eventID`.
        case acknowledged(eventID: Int64)
        case acknowledgementFailed(eventID: Int64, HeraldClientError)
        case storeFailed(HeraldClientError)
        /// ``HeraldClient/disconnect()`` finished.
        case disconnected
    }

    /// Gives the client token (from the app's backend, which has it minted by
    /// `POST /v1/client-tokens`). Called before the first connection and again after Herald
    /// refused the one in use (expired).
    public typealias TokenProvider = @Sendable () async throws -> String

    /// The notifications to show, each once: duplicates (a replay after a reconnect, or one
    /// already shown through a push) are dropped by Herald notification id.
    ///
    /// Each call returns a new sequence that replaces the previous one (which finishes): one
    /// consumer at a time. What arrives while no sequence is being iterated (before the first
    /// call, or after the consuming task was cancelled) is kept and handed to the next one.
    public func notifications() -> AsyncStream<HeraldNotification> {
        let (stream, continuation) = AsyncStream.makeStream(of: HeraldNotification.self, bufferingPolicy: .unbounded)
        let (previous, queued): (AsyncStream<HeraldNotification>.Continuation?, [HeraldNotification]) = outlet.withLock { o in
            defer { o.current = continuation; o.queued = [] }
            return (o.current, o.queued)
        }
        previous?.finish()
        for n in queued { continuation.yield(n) }
        return stream
    }

    let configuration: Configuration
    private let store: any HeraldClientStore
    private let tokenProvider: TokenProvider
    private let onEvent: @Sendable (Event) -> Void
    private let random: @Sendable () -> Double
    private let sleep: @Sendable (Duration) async throws -> Void
    /// Where notifications go: the current consumer's sequence, else a queue.
    private let outlet = Locked<(current: AsyncStream<HeraldNotification>.Continuation?, queued: [HeraldNotification])>((nil, []))
    private let ackSession: URLSession
    private let shared: Locked<Shared>
    /// Held while saving, so that saves reach the store in the order their snapshots were taken.
    private let saving = NSLock()

    private struct Shared {
        var persisted: HeraldClientState
        var recent: RecentIDs
        var dirty = false
        var token: String?
        var serverRetry: Duration?
        var status: Status = .idle
        /// The latest event id to acknowledge, and the last one Herald confirmed (this process).
        var pendingAck: Int64?
        var acked: Int64?
        var generation = 0
        var stoppedGeneration = 0
        var readTask: Task<Void, Never>?
        var ackTask: Task<Void, Never>?
        var ackSignal: AsyncStream<Void>.Continuation?
        /// The acknowledgement loop is waiting to retry a failed acknowledgement.
        var ackWaiting = false
        /// Tasks of a ``disconnect()`` still finishing: the next connection starts after them.
        var stopping: [Task<Void, Never>] = []
    }

    /// Creates a client (it does not connect until ``connect()``).
    /// - Parameters:
    ///   - store: where the last event id and the recent notification ids are kept; loaded now
    ///     (a store that fails to load starts empty, and `onEvent` hears ``Event/storeFailed(_:)``).
    ///   - tokenProvider: see ``TokenProvider``.
    ///   - onEvent: diagnostics (see ``Event``).
    ///   - random: values in `0..<1` for the backoff's jitter.
    ///   - sleep: waits between reconnections (throws when cancelled).
    public init(configuration: Configuration, store: any HeraldClientStore, tokenProvider: @escaping TokenProvider,
                onEvent: @escaping @Sendable (Event) -> Void = { _ in },
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
                sleep: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) }) {
        self.configuration = configuration
        self.store = store
        self.tokenProvider = tokenProvider
        self.onEvent = onEvent
        self.random = random
        self.sleep = sleep
        let state: HeraldClientState
        do { state = try store.load() } catch {
            onEvent(.storeFailed(error))
            state = HeraldClientState()
        }
        shared = Locked(Shared(persisted: state, recent: RecentIDs(state.recentNotificationIDs, limit: configuration.recentIDLimit)))
        let session = URLSessionConfiguration.ephemeral
        session.timeoutIntervalForRequest = ReconnectPolicy.seconds(configuration.requestTimeout)
        session.urlCache = nil
        ackSession = URLSession(configuration: session)
    }

    deinit {
        outlet.withLock { $0.current }?.finish()
        ackSession.finishTasksAndInvalidate()
    }

    // MARK: Lifecycle

    /// Starts holding the stream (call when the app enters the foreground). Does nothing when
    /// already connected or connecting; after a ``disconnect()`` still finishing, the new
    /// connection opens once it is done.
    public func connect() {
        shared.withLock { s in
            guard s.readTask == nil else { return }
            s.generation += 1
            let generation = s.generation
            let prior = s.stopping
            let (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
            s.ackSignal = signal
            s.status = .connecting(attempt: 0)
            // Both tasks are kept here and awaited by disconnect(); neither outlives it.
            s.ackTask = Task {
                for t in prior { await t.value }
                await self.acknowledge(signals, generation: generation)
            }
            s.readTask = Task {
                for t in prior { await t.value }
                await self.readLoop()
            }
        }
    }

    /// Stops holding the stream (call when the app leaves the foreground): the socket is closed
    /// before this returns; then the last acknowledgement still due is sent (bounded by
    /// ``Configuration/requestTimeout``; one waiting to be retried after a failure is dropped)
    /// and the state is saved.
    /// - Important: Herald records acknowledgements only for a device whose stream is open, so
    ///   what was read in the last round trip before the close may still go out by push after
    ///   the app's `ackTimeout`; ``isDuplicate(remoteNotification:)`` recognises it.
    public func disconnect() async {
        let (read, ack, signal, waitFor, ackWaiting) = shared.withLock { s in
            let taken = (s.readTask, s.ackTask, s.ackSignal)
            s.stoppedGeneration = s.generation
            s.readTask = nil
            s.ackTask = nil
            s.ackSignal = nil
            s.stopping += [taken.0, taken.1].compactMap { $0 }
            return (taken.0, taken.1, taken.2, s.stopping, s.ackWaiting)
        }
        read?.cancel()
        await read?.value
        // An acknowledgement waiting to be retried gives up; one due or in flight is sent.
        if ackWaiting { ack?.cancel() }
        signal?.yield(())
        signal?.finish()
        await ack?.value
        for t in waitFor { await t.value }
        save()
        shared.withLock { s in
            s.stopping.removeAll { t in waitFor.contains(t) }
            if s.readTask == nil { s.status = .idle }
        }
        onEvent(.disconnected)
    }

    /// Where the connection stands now.
    public var status: Status { shared.withLock { $0.status } }

    /// The last event id read from the stream (what a reconnect sends as `Last-Event-ID`).
    public var lastEventID: String? { shared.withLock { $0.persisted.lastEventID } }

    // MARK: Duplicates

    /// Whether a push is one the app already showed (it came down the stream first): call it
    /// from `application(_:didReceiveRemoteNotification:fetchCompletionHandler:)`,
    /// `userNotificationCenter(_:willPresent:…)` and for the launch options' remote
    /// notification. A push not yet seen is recorded, so the same notification arriving later
    /// down the stream (a replay) is dropped.
    /// - Returns: `true` for a duplicate (do not show it again); `false` for a new one, or a
    ///   payload without a Herald id under ``Configuration/notificationIDKey``.
    public func isDuplicate(remoteNotification userInfo: [AnyHashable: Any]) -> Bool {
        guard let id = userInfo[configuration.notificationIDKey] as? String, !id.isEmpty else { return false }
        return isDuplicate(notificationID: id)
    }

    /// Whether the notification with this Herald id was already shown; records it when not.
    public func isDuplicate(notificationID id: String) -> Bool {
        let duplicate = !shared.withLock { s in record(id, in: &s) }
        if !duplicate { save() }
        return duplicate
    }

    private func record(_ id: String, in s: inout Shared) -> Bool {
        guard s.recent.insert(id) else { return false }
        s.persisted.recentNotificationIDs = s.recent.order
        s.dirty = true
        return true
    }

    /// Saves the state when it changed since the last save.
    private func save() {
        saving.lock()
        defer { saving.unlock() }
        let snapshot: HeraldClientState? = shared.withLock { s in
            guard s.dirty else { return nil }
            s.dirty = false
            return s.persisted
        }
        guard let snapshot else { return }
        do { try store.save(snapshot) } catch {
            shared.withLock { $0.dirty = true }
            onEvent(.storeFailed(error))
        }
    }

    // MARK: The connection loop

    private func readLoop() async {
        var attempt = 0
        while !Task.isCancelled {
            shared.withLock { $0.status = .connecting(attempt: attempt) }
            onEvent(.connecting(attempt: attempt))
            var failure: HeraldClientError?
            do {
                let token = try await currentToken()
                let (connected, error) = await runConnection(token: token)
                if connected { attempt = 0 }
                failure = error
            } catch {
                failure = error
            }
            if Task.isCancelled { break }
            var retryAfter: Duration?
            switch failure {
            case .unauthorized?: shared.withLock { $0.token = nil }
            case .http(_, _, _, let seconds?)?: retryAfter = .seconds(seconds)
            default: break
            }
            onEvent(.dropped(failure))
            let serverRetry = shared.withLock { $0.serverRetry }
            let delay = configuration.reconnect.delay(attempt: attempt, serverRetry: serverRetry, retryAfter: retryAfter, random: random())
            shared.withLock { $0.status = .waiting(attempt: attempt, delay: delay) }
            onEvent(.waiting(attempt: attempt, delay: delay))
            do { try await sleep(delay) } catch { break }
            attempt += 1
        }
    }

    /// The cached client token, or a new one from the provider. A token for another user or
    /// device than the saved state's forgets the saved last event id (ids are per user).
    private func currentToken() async throws(HeraldClientError) -> String {
        if let token = shared.withLock({ $0.token }) { return token }
        let token: String
        do { token = try await tokenProvider() } catch {
            throw .tokenProvider(String(describing: error))
        }
        let owner = ClientTokenPeek.owner(of: token)
        shared.withLock { s in
            s.token = token
            guard let owner, s.persisted.owner != owner else { return }
            if s.persisted.owner != nil {
                s.persisted.lastEventID = nil
                s.pendingAck = nil
                s.acked = nil
            }
            s.persisted.owner = owner
            s.dirty = true
        }
        return token
    }

    /// One connection: opens the stream, reads it until it ends, fails or the task is cancelled,
    /// then closes it (awaited: the socket is closed on return).
    /// - Returns: whether the stream was established (200), and why it ended (`nil`: a clean end
    ///   or a cancellation).
    private func runConnection(token: String) async -> (connected: Bool, error: HeraldClientError?) {
        let lastEventID = shared.withLock { $0.persisted.lastEventID }
        var request = URLRequest(url: endpoint("/v1/stream", query: [("app", configuration.app), ("ack", "1")]))
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        request.setValue("no-cache", forHTTPHeaderField: "Cache-Control")
        if let lastEventID, !lastEventID.isEmpty { request.setValue(lastEventID, forHTTPHeaderField: "Last-Event-ID") }
        let connection = EventStreamConnection(request: request, idleTimeout: ReconnectPolicy.seconds(configuration.idleTimeout))
        connection.start()
        var parser = ServerSentEventParser(lastEventID: lastEventID ?? "")
        var status = 0, headers: [String: String] = [:], body = Data()
        var connected = false
        var failure: HeraldClientError?
        do {
            for try await piece in connection.pieces {
                switch piece {
                case .response(let code, let h):
                    status = code
                    headers = h
                    let type = (h["content-type"] ?? "").split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                    if code == 200 && type == "text/event-stream" {
                        connected = true
                        shared.withLock { s in
                            s.status = .connected
                            // What the last connection read may not have been acknowledged yet.
                            if let n = Self.eventNumber(lastEventID), s.acked != n { s.pendingAck = n }
                        }
                        onEvent(.connected(lastEventID: lastEventID))
                        signalAck()
                    }
                case .bytes(let data):
                    if connected {
                        handle(parser.feed(data), lastEventID: parser.lastEventID)
                    } else if body.count < 65_536 {
                        body.append(data)
                    }
                }
                if !connected && status == 200 {
                    let type = headers["content-type"] ?? "none"
                    failure = .http(status: 200, code: nil, message: "expected Content-Type text/event-stream, found \(type)", retryAfter: nil)
                    break
                }
            }
            if failure == nil && !connected && !Task.isCancelled {
                failure = Self.httpError(status: status, headers: headers, body: body)
            }
        } catch {
            if !Task.isCancelled { failure = (error as? HeraldClientError) ?? .transport(String(describing: error)) }
        }
        await connection.close()
        return (connected, failure)
    }

    /// What one read of the stream completed.
    private func handle(_ outputs: [ServerSentEventParser.Output], lastEventID: String) {
        for item in outputs {
            switch item {
            case .retry(let ms):
                shared.withLock { $0.serverRetry = .milliseconds(ms) }
            case .comment:
                break
            case .event(let event):
                guard event.type == "notification" else { continue }
                let number = Self.eventNumber(event.lastEventID)
                let notification: HeraldNotification
                do { notification = try HeraldNotification.decode(event.data, eventID: number) } catch {
                    onEvent(.invalidEvent(error))
                    continue
                }
                let new = shared.withLock { s in record(notification.id, in: &s) }
                if new {
                    deliver(notification)
                    onEvent(.received(notification))
                } else {
                    onEvent(.duplicate(notificationID: notification.id, eventID: number))
                }
            }
        }
        // Everything read so far was handed over: that is what the acknowledgement covers.
        // An empty last event ID string means none (no `Last-Event-ID` on reconnect).
        let current: String? = lastEventID.isEmpty ? nil : lastEventID
        let changed: Bool = shared.withLock { s in
            guard s.persisted.lastEventID != current else { return false }
            s.persisted.lastEventID = current
            s.dirty = true
            if let n = Self.eventNumber(lastEventID) { s.pendingAck = n }
            return true
        }
        if changed { signalAck() }
    }

    private func deliver(_ notification: HeraldNotification) {
        outlet.withLock { o in
            if let current = o.current, case .enqueued = current.yield(notification) { return }
            o.current = nil
            o.queued.append(notification)
        }
    }

    private func signalAck() { _ = shared.withLock { $0.ackSignal }?.yield(()) }

    // MARK: Acknowledgements

    /// Sends `POST /v1/stream/ack` with the latest id read each time it is woken (so a burst
    /// costs one request per round trip, not one per event); the state is saved before each.
    /// Ends when `signals` finishes (``disconnect()``), after sending what is still due.
    private func acknowledge(_ signals: AsyncStream<Void>, generation: Int) async {
        var failures = 0
        for await _ in signals {
            while true {
                let target: Int64? = shared.withLock { s in
                    guard let p = s.pendingAck, p != s.acked else { return nil }
                    return p
                }
                guard let target else { break }
                save()
                do {
                    try await postAck(target)
                    failures = 0
                    shared.withLock { s in s.acked = target }
                    onEvent(.acknowledged(eventID: target))
                } catch {
                    onEvent(.acknowledgementFailed(eventID: target, error))
                    if case .unauthorized = error { shared.withLock { $0.token = nil } }
                    if case .http(let status, _, _, _) = error, (400..<500).contains(status), status != 408, status != 429 {
                        // Herald refuses this acknowledgement for good (e.g. a server without
                        // acknowledgements answers 404): wait for the next event, don't loop.
                        break
                    }
                    // Wait before trying again, unless disconnecting (checked and noted under
                    // one lock, so disconnect() either stops this loop here or cancels the wait).
                    let stopping = shared.withLock { s in
                        if s.stoppedGeneration >= generation { return true }
                        s.ackWaiting = true
                        return false
                    }
                    if stopping || Task.isCancelled { return }
                    let delay = configuration.reconnect.delay(attempt: failures, serverRetry: nil, random: random())
                    failures += 1
                    let slept: Bool
                    do { try await sleep(delay); slept = true } catch { slept = false }
                    shared.withLock { $0.ackWaiting = false }
                    if !slept { return }
                }
            }
        }
    }

    private func postAck(_ id: Int64) async throws(HeraldClientError) {
        let token = try await currentToken()
        var request = URLRequest(url: endpoint("/v1/stream/ack", query: [("app", configuration.app)]))
        request.httpMethod = "POST"
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"id":\#(id)}"#.utf8)
        request.timeoutInterval = ReconnectPolicy.seconds(configuration.requestTimeout)
        let data: Data, response: URLResponse
        do { (data, response) = try await ackSession.data(for: request) } catch {
            throw .transport(EventStreamConnection.describe(error))
        }
        let http = response as? HTTPURLResponse
        let status = http?.statusCode ?? 0
        guard !(200..<300).contains(status) else { return }
        var headers: [String: String] = [:]
        for (k, v) in http?.allHeaderFields ?? [:] {
            if let k = k as? String, let v = v as? String { headers[k.lowercased()] = v }
        }
        throw Self.httpError(status: status, headers: headers, body: data)
    }

    // MARK: Helpers

    /// `server` + `path` (after the server URL's own path) + the query, percent-encoded strictly.
    func endpoint(_ path: String, query: [(String, String)]) -> URL {
        var base = configuration.server.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let allowed = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let q = query.map { k, v in "\(k)=\(v.addingPercentEncoding(withAllowedCharacters: allowed) ?? v)" }.joined(separator: "&")
        return URL(string: base + path + (q.isEmpty ? "" : "?" + q))!
    }

    /// An event id Herald numbered (ASCII digits only), as acknowledgements carry it.
    static func eventNumber(_ id: String?) -> Int64? {
        guard let id, !id.isEmpty, id.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(id)
    }

    /// The error an API answer carries (`{"error": {"code", "message"}}`).
    static func httpError(status: Int, headers: [String: String], body: Data) -> HeraldClientError {
        var code: String?, message = String(decoding: body.prefix(512), as: UTF8.self)
        if let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
           let error = object["error"] as? [String: Any] {
            code = error["code"] as? String
            message = (error["message"] as? String) ?? message
        }
        if status == 0 { return .transport("no HTTP answer") }
        if status == 401 { return .unauthorized(message) }
        let retryAfter = headers["retry-after"].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        return .http(status: status, code: code, message: message.isEmpty ? "HTTP \(status)" : message, retryAfter: retryAfter)
    }
}
