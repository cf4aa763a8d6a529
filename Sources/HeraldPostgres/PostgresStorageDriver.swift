import FoundationEssentials
import Glibc
import HeraldCore

/// The `postgresql` storage driver: the token store and the queue in one PostgreSQL database
/// (`storage.url`), shared by any number of Herald nodes. Opening migrates the schema under an
/// advisory lock, so nodes starting at once on an empty database do not race.
public struct PostgresStorageDriver: StorageDriver {
    public typealias Section = PostgresStorageConfiguration

    public init() {}

    private static func conninfo(_ configuration: HeraldConfiguration) throws -> String {
        let url = try configuration.postgresStorage().url
        guard !url.isEmpty else { throw StoreError("storage.url: required for \"driver\": \"postgresql\"") }
        return url
    }

    /// Runs `body` with a connection of its own on a thread of its own, then closes it.
    private static func once<T: Sendable>(_ conninfo: String, _ body: @escaping @Sendable (PGConnection) throws -> T) async throws -> T {
        let pool = PGPool(conninfo: conninfo, size: 1, name: "herald-pg-setup")
        do {
            let value = try await pool.run(body)
            await pool.close()
            return value
        } catch {
            await pool.close()
            throw error
        }
    }

    public func open(_ configuration: HeraldConfiguration, metrics: MetricsRegistry, exclusive: Bool) async throws -> OpenStorage {
        let conninfo = try Self.conninfo(configuration)
        try await Self.once(conninfo) { db in _ = try PostgresSchema.migrate(db) }
        let pool = PGPool(conninfo: conninfo, size: try configuration.postgresStorage().pool)
        let queue = PostgresDeliveryQueue(conninfo: conninfo, pool: pool, maxCommitBatch: configuration.server.maxCommitBatch,
                                          metrics: metrics)
        let presence = PostgresPresence(conninfo: conninfo, nodeID: queue.nodeID, metrics: metrics)
        let tokens = PostgresTokenStore(pool: pool)
        return OpenStorage(tokens: tokens, queue: queue, inbox: PostgresInboxStore(pool: pool), presence: presence, channels: tokens,
                           events: PostgresEventOutbox(pool: pool, ownsPool: false)) {
            presence.stop()
            await queue.close()
            await pool.close()
        }
    }

    public func openEventOutbox(_ configuration: HeraldConfiguration) async throws -> (any EventOutbox)? {
        let conninfo = try Self.conninfo(configuration)
        try await Self.once(conninfo) { db in _ = try PostgresSchema.migrate(db) }
        return PostgresEventOutbox(pool: PGPool(conninfo: conninfo, size: 1, name: "herald-pg-cli"), ownsPool: true)
    }

    public func openTokenStore(_ configuration: HeraldConfiguration) async throws -> any TokenStore {
        let conninfo = try Self.conninfo(configuration)
        try await Self.once(conninfo) { db in _ = try PostgresSchema.migrate(db) }
        return PostgresTokenStore(pool: PGPool(conninfo: conninfo, size: 2, name: "herald-pg-cli"))
    }

    public func migrate(_ configuration: HeraldConfiguration) async throws -> String {
        let conninfo = try Self.conninfo(configuration)
        let (from, to) = try await Self.once(conninfo) { db in try PostgresSchema.migrate(db) }
        return from == to ? "schema version \(to): up to date" : "schema migrated from version \(from) to \(to)"
    }

    public func describe(_ configuration: HeraldConfiguration) async -> [CheckFinding] {
        let shown = Redact.connectionString((try? configuration.postgresStorage().url) ?? "")
        do {
            let conninfo = try Self.conninfo(configuration)
            let (server, version) = try await Self.once(conninfo) { db in (try db.serverVersion(), try PostgresSchema.version(db)) }
            let want = PostgresSchema.steps.count
            let state = version == want ? "up to date" : version < want ? "behind: run 'herald migrate' (the daemon also migrates on start)"
                : "newer than this Herald"
            return [CheckFinding(.ok, "postgresql \(shown): server \(server), pool \((try? configuration.postgresStorage().pool) ?? 0)"),
                    CheckFinding(version > want ? .error : version < want ? .warning : .ok,
                                 "schema version \(version) (this Herald: \(want)): \(state)")]
        } catch {
            return [CheckFinding(.error, "postgresql \(shown): \(error)")]
        }
    }
}
