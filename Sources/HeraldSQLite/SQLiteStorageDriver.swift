import FoundationEssentials
import Glibc
import HeraldCore

/// The `sqlite` storage driver: the token store, the durable queue and the inbox in one SQLite file
/// (`storage.path`), one daemon per file (a lock file beside it).
public struct SQLiteStorageDriver: StorageDriver {
    public typealias Section = SQLiteStorageConfiguration

    public init() {}

    public func open(_ configuration: HeraldConfiguration, metrics: MetricsRegistry, exclusive: Bool) async throws -> OpenStorage {
        SQLiteDeliveryQueue.tuneProcess()
        let storage = try configuration.sqliteStorage()
        let lock = exclusive ? try DatabaseLock(database: storage.path) : nil
        do {
            let tokens = try SQLiteTokenStore(configuration: storage)
            let queue = try SQLiteDeliveryQueue(configuration: configuration, metrics: metrics)
            let inbox: SQLiteInboxStore
            do { inbox = try SQLiteInboxStore(sharing: queue.writer, configuration: storage) } catch {
                await queue.close()
                throw error
            }
            queue.attach(inbox: inbox)
            return OpenStorage(tokens: tokens, queue: queue, inbox: inbox, channels: tokens, events: queue) {
                inbox.close()
                await queue.close()
                lock?.release()
            }
        } catch {
            lock?.release()
            throw StoreError("cannot open the store \(storage.path): \(error)")
        }
    }

    public func openEventOutbox(_ configuration: HeraldConfiguration) async throws -> (any EventOutbox)? {
        let storage = try configuration.sqliteStorage()
        return try SQLiteEventStore(path: storage.path, busyTimeout: storage.busyTimeout)
    }

    public func openTokenStore(_ configuration: HeraldConfiguration) async throws -> any TokenStore {
        try SQLiteTokenStore(configuration: configuration.sqliteStorage())
    }

    public func describe(_ configuration: HeraldConfiguration) async -> [CheckFinding] {
        let s: SQLiteStorageConfiguration
        do { s = try configuration.sqliteStorage() } catch { return [CheckFinding(.error, "\(error)")] }
        var findings = [CheckFinding(.ok, "sqlite \(s.path) (synchronous=\(s.synchronous.rawValue))")]
        if FileManager.default.fileExists(atPath: s.path) {
            do {
                let version = try SQLiteTokenStore(configuration: s).schemaVersion()
                findings.append(CheckFinding(.ok, "schema version \(version) (this Herald: \(HeraldSchema.migrations.steps.count))"))
            } catch {
                findings.append(CheckFinding(.error, "cannot open \(s.path): \(error)"))
            }
        } else {
            findings.append(CheckFinding(.info, "\(s.path) does not exist yet; it is created on first use"))
        }
        return findings
    }
}

extension StorageDrivers {
    /// The drivers that need no server: SQLite.
    public static var embedded: StorageDrivers {
        var drivers = StorageDrivers()
        drivers.register(SQLiteStorageDriver())
        return drivers
    }
}
