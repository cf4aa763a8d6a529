import Foundation
import HeraldCore
import HeraldLogTransport
import HeraldPostgres
import HeraldSQLite
import Testing

/// The `postgresql` driver reads its own keys of `storage` (issue 20): the core only picks the driver.
@Suite struct PostgresStorageConfigurationTests {
    func parse(_ storage: String) throws(ConfigurationError) -> HeraldConfiguration {
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        registry.register(storage: SQLiteStorageConfiguration.self)
        registry.register(storage: PostgresStorageConfiguration.self)
        return try HeraldConfiguration.parse(Data(#"{"storage": \#(storage), "apps": {"a": {"routes": ["t"]}}, "transports": {"t": {"type": "log"}}}"#.utf8),
                                             source: "test.json", baseDirectory: "/srv/herald", registry: registry, environment: [:])
    }

    func errors(_ storage: String) -> [String] {
        do { _ = try parse(storage); return [] } catch { return error.errors.map(\.description) }
    }

    @Test func readsItsKeysWithTheirDefaults() throws {
        let c = try parse(#"{"driver": "postgresql", "url": "postgresql://h/db"}"#)
        #expect(try c.postgresStorage() == PostgresStorageConfiguration(url: "postgresql://h/db", pool: 8))
        #expect(try parse(#"{"driver": "postgresql", "url": "postgresql://h/db", "pool": 3}"#).postgresStorage().pool == 3)
        #expect(c.storage.durableWrites && c.warnings.isEmpty)
    }

    @Test func anUnknownKeyIsReportedWithItsPathAndTheDriversKeys() throws {
        let c = try parse(#"{"driver": "postgresql", "url": "postgresql://h/db", "poool": 3}"#)
        #expect(c.warnings.map(\.description) == [
            "storage.poool: unknown key, ignored; did you mean \"pool\"? (\"postgresql\" reads url, pool)",
        ])
        // A key another registered driver reads is an error: the file says one thing and means another.
        #expect(errors(#"{"driver": "postgresql", "url": "postgresql://h/db", "busyTimeout": 3}"#) == [
            "storage.busyTimeout: only for \"driver\": \"sqlite\"; \"postgresql\" reads url, pool",
        ])
        #expect(errors(#"{"driver": "sqlite", "pool": 3}"#) == [
            "storage.pool: only for \"driver\": \"postgresql\"; \"sqlite\" reads path, synchronous, busyTimeout",
        ])
    }

    @Test func aBadValueNamesTheKey() {
        #expect(errors(#"{"driver": "postgresql", "url": 5, "pool": 0}"#) == [
            "storage.url: expected a string, found a number",
            "storage.pool: must be between 1 and 256, found 0",
        ])
        #expect(errors(#"{"driver": "postgresql", "url": ""}"#) == ["storage.url: must not be empty"])
        #expect(errors(#"{"driver": "postgres"}"#) == ["storage.driver: unknown value \"postgres\"; expected one of: sqlite, postgresql"])
    }
}
