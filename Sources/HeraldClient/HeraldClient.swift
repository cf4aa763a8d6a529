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
        /// Opening the stream; `attempt` counts the failures since the last connection that worked.
        case connecting(attempt: Int)
        /// The stream answered 200; `lastEventID` is what was sent as `Last-Event-ID`.
        case connected(lastEventID: String?)
        /// The connection ended (`nil`: the server ended the stream cleanly, e.g. it is stopping).
        case dropped(HeraldClientError?)
        /// Waiting `delay` before reconnection `attempt`.
        case waiting(attempt: Int, delay: Duration)
        /// A notification went to ``HeraldClient/notifications()``.
        case received(HeraldNotification)
        /// A notification already shown (through the stream or a push) was dropped.
        case duplicate(notificationID: String, eventID: Int64?)
        /// An event that is not a notification was skipped (it is still acknowledged).
        case invalidEvent(HeraldClientError)
        /// Herald confirmed everything up to `eventID`.
        case acknowledged(eventID: Int64)
        /// The acknowledgement of `eventID` failed (it is tried again with backoff while
        /// connected, unless Herald refused it for good, e.g. 404 from a server without acks).
        case acknowledgementFailed(eventID: Int64, HeraldClientError)
        /// The store could not load (the client started empty) or save (it tries again at the next save).
        case storeFailed(HeraldClientError)
        /// ``HeraldClient/disconnect()`` finished.
        case disconnected
    }

    /// Gives the client token (from the app's backend, which has it minted by
    /// `POST /v1/client-tokens`). Called before the first connection; the token is kept for
    /// the next ones until Herald refuses it (401: it is then replaced and tried again at once)
    /// or its `exp` is less than 5 s away.
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
    let store: any HeraldClientStore
    let tokenProvider: TokenProvider
    let onEvent: @Sendable (Event) -> Void
    let random: @Sendable () -> Double
    let sleep: @Sendable (Duration) async throws -> Void
    /// Where notifications go: the current consumer's sequence, else a queue.
    let outlet = Locked<(current: AsyncStream<HeraldNotification>.Continuation?, queued: [HeraldNotification])>((nil, []))
    let ackSession: URLSession
    let shared: Locked<Shared>
    /// Held while saving, so that saves reach the store in the order their snapshots were taken.
    private let saving = Locked(())

    struct Shared {
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

    func record(_ id: String, in s: inout Shared) -> Bool {
        guard s.recent.insert(id) else { return false }
        s.persisted.recentNotificationIDs = s.recent.order
        s.dirty = true
        return true
    }

    /// Saves the state when it changed since the last save.
    func save() {
        saving.withLock { _ in
            let snapshot: HeraldClientState? = shared.withLock { s in
                guard s.dirty else { return nil }
                s.dirty = false
                return s.persisted
            }
            guard let snapshot else { return }
            do { try store.save(snapshot) } catch {
                shared.withLock { $0.dirty = true }
                onEvent(.storeFailed(error as? HeraldClientError ?? .store(String(describing: error))))
            }
        }
    }
}
