import FoundationEssentials
import Glibc
import HeraldCore

/// The `postgresql` driver's keys of `storage` (`url`, `pool`), read here rather than by the core.
/// It comes with ``PostgresStorageDriver`` (its `Section`): registering the driver in `main` registers it.
public struct PostgresStorageConfiguration: StorageSection, Equatable {
    public static let driver = "postgresql"
    public static let keys = ["url", "pool"]

    /// The libpq connection string or URI (required; `${ENV}` for the password).
    /// Never logged as is: see ``Redact/connectionString(_:)``.
    public var url: String
    /// Connections the daemon opens (claims, outcomes, reads). Default 8.
    public var pool: Int = 8

    public init(url: String, pool: Int = 8) {
        self.url = url
        self.pool = pool
    }

    public init?(node: JSONNode) {
        let url = node.string("url")
        if let n = node.int("pool", in: 1...256) { pool = n }
        if !node.has("url") {
            node.error(at: "url", "required for \"driver\": \"postgresql\": a libpq connection string such as \"postgresql://herald:${PGPASSWORD}@127.0.0.1:5432/herald\"")
        }
        guard let url else { return nil }
        self.url = url
    }

    /// PostgreSQL commits are durable (the server's own `synchronous_commit` aside).
    public var durableWrites: Bool { true }
}

extension HeraldConfiguration {
    /// The `postgresql` driver's section of `storage`.
    /// - Throws: ``ConfigurationError`` when `storage.driver` is another driver or the section is invalid.
    public func postgresStorage() throws(ConfigurationError) -> PostgresStorageConfiguration {
        try storage.section(PostgresStorageConfiguration.self)
    }
}
