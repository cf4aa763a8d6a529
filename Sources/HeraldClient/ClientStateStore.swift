import Foundation

/// What the client keeps between launches: where the stream stands and which notifications it
/// has shown.
public struct HeraldClientState: Sendable, Equatable, Codable {
    /// The last event id read from the stream (sent as `Last-Event-ID` on reconnect).
    public var lastEventID: String?
    /// Whose stream `lastEventID` belongs to (the client token's `sub` and `device`): a token for
    /// someone else starts without it, as event ids are numbered per user.
    public var owner: String?
    /// Herald ids of the notifications shown most recently (stream and push), oldest first.
    public var recentNotificationIDs: [String]

    /// Creates a state.
    public init(lastEventID: String? = nil, owner: String? = nil, recentNotificationIDs: [String] = []) {
        self.lastEventID = lastEventID
        self.owner = owner
        self.recentNotificationIDs = recentNotificationIDs
    }

    enum CodingKeys: String, CodingKey {
        case lastEventID = "last_event_id", owner, recentNotificationIDs = "recent_notification_ids"
    }
}

/// Where a ``HeraldClient`` keeps its ``HeraldClientState``.
///
/// The client loads once when created and saves before each acknowledgement (so what it acked
/// is on disk), after a push is recorded, and on ``HeraldClient/disconnect()``; saves are
/// coalesced under bursts, never one per event.
/// - Important: calls come from the client's tasks, one at a time but not on one thread; an
///   implementation must not block for long (a file write or `UserDefaults` is fine).
public protocol HeraldClientStore: Sendable {
    /// The saved state; an empty state when nothing was saved yet.
    func load() throws(HeraldClientError) -> HeraldClientState
    /// Replaces the saved state.
    func save(_ state: HeraldClientState) throws(HeraldClientError)
}

/// A store in memory (tests, or an app that wants no persistence).
public final class InMemoryClientStore: HeraldClientStore, Sendable {
    private let state: Locked<(state: HeraldClientState, saves: Int)>

    /// Creates a store holding `state`.
    public init(_ state: HeraldClientState = HeraldClientState()) { self.state = Locked((state, 0)) }

    /// The state held.
    public func load() -> HeraldClientState { state.withLock { $0.state } }
    /// Replaces the state held.
    public func save(_ state: HeraldClientState) { self.state.withLock { $0 = (state, $0.saves + 1) } }

    /// How many times the state was saved.
    public var saveCount: Int { state.withLock { $0.saves } }
}

/// A store in a JSON file, replaced atomically on each save (Linux, macOS command-line tools, tests).
public final class FileClientStore: HeraldClientStore, Sendable {
    /// The file's path.
    public let path: String

    /// A store at `path` (the folder must exist; the file is created on the first save).
    public init(path: String) { self.path = path }

    /// The file's state; empty when there is no file yet.
    /// - Throws: ``HeraldClientError/store(_:)`` naming the file when it cannot be read or decoded.
    public func load() throws(HeraldClientError) -> HeraldClientState {
        guard FileManager.default.fileExists(atPath: path) else { return HeraldClientState() }
        do {
            return try JSONDecoder().decode(HeraldClientState.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            throw .store("cannot read \(path): \(error)")
        }
    }

    /// Writes the state (to a temporary file renamed over the old one).
    /// - Throws: ``HeraldClientError/store(_:)`` naming the file.
    public func save(_ state: HeraldClientState) throws(HeraldClientError) {
        do {
            try JSONEncoder().encode(state).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw .store("cannot write \(path): \(error)")
        }
    }
}

/// A store in `UserDefaults` (the natural choice in an iOS or macOS app), one key per client.
///
/// `UserDefaults` is documented thread-safe on Apple platforms; this class only reads and writes
/// one `Data` value, hence `@unchecked Sendable`.
public final class UserDefaultsClientStore: HeraldClientStore, @unchecked Sendable {
    private let defaults: UserDefaults
    /// The key the state is kept under.
    public let key: String

    /// A store under `key` (default `"herald.client.<app>"`) in `defaults`.
    public init(defaults: UserDefaults = .standard, app: String, key: String? = nil) {
        self.defaults = defaults
        self.key = key ?? "herald.client.\(app)"
    }

    /// The state under ``key``; empty when none was saved.
    /// - Throws: ``HeraldClientError/store(_:)`` naming the key when the value cannot be decoded.
    public func load() throws(HeraldClientError) -> HeraldClientState {
        guard let data = defaults.data(forKey: key) else { return HeraldClientState() }
        do { return try JSONDecoder().decode(HeraldClientState.self, from: data) } catch {
            throw .store("UserDefaults key \(key): \(error)")
        }
    }

    /// Stores the state under ``key`` (as JSON `Data`).
    public func save(_ state: HeraldClientState) throws(HeraldClientError) {
        do { defaults.set(try JSONEncoder().encode(state), forKey: key) } catch {
            throw .store("UserDefaults key \(key): \(error)")
        }
    }
}
