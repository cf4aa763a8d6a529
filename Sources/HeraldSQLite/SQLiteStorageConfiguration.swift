import FoundationEssentials
import Glibc
import HeraldCore

/// The `sqlite` driver's keys of `storage` (`path`, `synchronous`, `busyTimeout`), read here rather
/// than by the core. It comes with ``SQLiteStorageDriver`` (its `Section`): registering the driver in `main` registers it.
public struct SQLiteStorageConfiguration: StorageSection, Equatable {
    /// How hard SQLite works to survive power loss; `full` (default) fsyncs every commit.
    public enum Synchronous: String, CaseIterable, Sendable { case full, normal }

    public static let driver = "sqlite"
    public static let keys = ["path", "synchronous", "busyTimeout"]

    /// Database file, resolved against the config's folder. Default `var/herald.db`.
    public var path: String
    public var synchronous: Synchronous = .full
    /// How long a writer waits for a lock before failing. Default 5 s.
    public var busyTimeout: TimeInterval = 5

    public init(path: String, synchronous: Synchronous = .full, busyTimeout: TimeInterval = 5) {
        self.path = path
        self.synchronous = synchronous
        self.busyTimeout = busyTimeout
    }

    public init?(node: JSONNode) {
        path = node.resolve("var/herald.db")
        if let p = node.filePath("path", mustExist: false) { path = p }
        if let s = node.oneOf("synchronous", Synchronous.self) { synchronous = s }
        if let t = node.duration("busyTimeout") { busyTimeout = t }
    }

    public var durableWrites: Bool { synchronous == .full }
}

extension HeraldConfiguration {
    /// The `sqlite` driver's section of `storage`.
    /// - Throws: ``ConfigurationError`` when `storage.driver` is another driver or the section is invalid.
    public func sqliteStorage() throws(ConfigurationError) -> SQLiteStorageConfiguration {
        try storage.section(SQLiteStorageConfiguration.self)
    }
}
