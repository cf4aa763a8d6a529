import Foundation
import HeraldCore
import HeraldLogTransport
import HeraldSQLite
import Testing

/// The `sqlite` driver reads its own keys of `storage` (issue 20): the core only picks the driver.
@Suite struct SQLiteStorageConfigurationTests {
    func parse(_ storage: String, registered: Bool = true) throws(ConfigurationError) -> HeraldConfiguration {
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        if registered { registry.register(storage: SQLiteStorageConfiguration.self) }
        return try HeraldConfiguration.parse(Data(#"{"storage": \#(storage), "apps": {"a": {"routes": ["t"]}}, "transports": {"t": {"type": "log"}}}"#.utf8),
                                             source: "test.json", baseDirectory: "/srv/herald", registry: registry, environment: [:])
    }

    func errors(_ storage: String) -> [String] {
        do { _ = try parse(storage); return [] } catch { return error.errors.map(\.description) }
    }

    @Test func readsItsKeysWithTheirDefaults() throws {
        #expect(try parse("{}").sqliteStorage() == SQLiteStorageConfiguration(path: "/srv/herald/var/herald.db"))
        let c = try parse(#"{"driver": "sqlite", "path": "data/h.db", "synchronous": "normal", "busyTimeout": "20s"}"#)
        #expect(try c.sqliteStorage() == SQLiteStorageConfiguration(path: "/srv/herald/data/h.db", synchronous: .normal, busyTimeout: 20))
        #expect(c.storage.driver == "sqlite" && !c.storage.durableWrites)
        #expect(c.warnings.isEmpty, "\(c.warnings)")
        #expect(try parse(#"{"synchronous": "full"}"#).storage.durableWrites)
    }

    @Test func anUnknownKeyIsReportedWithItsPathAndTheDriversKeys() throws {
        let c = try parse(#"{"path": "h.db", "patth": "x.db", "cache": 3}"#)
        #expect(c.warnings.map(\.description) == [
            "storage.cache: unknown key, ignored (\"sqlite\" reads path, synchronous, busyTimeout)",
            "storage.patth: unknown key, ignored; did you mean \"path\"? (\"sqlite\" reads path, synchronous, busyTimeout)",
        ])
    }

    @Test func aBadValueNamesTheKey() {
        #expect(errors(#"{"synchronous": "sometimes", "busyTimeout": "soon", "path": 3}"#) == [
            "storage.path: expected a string, found a number",
            "storage.synchronous: unknown value \"sometimes\"; expected one of: full, normal",
            "storage.busyTimeout: expected a duration such as 30, \"30s\", \"5m\", \"2h\" or \"7d\", found \"soon\"",
        ])
        #expect(errors(#""herald.db""#) == [#"storage: expected an object such as {"driver": "sqlite"}, found a string"#])
    }

    /// Registries built for tests register no storage section: the driver reads `storage` when it opens.
    @Test func withoutARegisteredSectionTheDriverReadsOnFirstUse() throws {
        let c = try parse(#"{"path": "h.db", "synchronous": "normal", "whatever": 1}"#, registered: false)
        #expect(c.warnings.isEmpty && c.storage.section == nil)
        #expect(try c.sqliteStorage() == SQLiteStorageConfiguration(path: "/srv/herald/h.db", synchronous: .normal))
        let bad = try parse(#"{"synchronous": "sometimes"}"#, registered: false)
        #expect(throws: ConfigurationError.self) { try bad.sqliteStorage() }
        let other = try parse(#"{"driver": "postgresql"}"#, registered: false)
        do {
            _ = try other.sqliteStorage()
            Issue.record("a postgresql configuration gave a sqlite section")
        } catch {
            #expect(error.errors.map(\.description) == [#"storage.driver: is "postgresql", not "sqlite""#])
        }
    }
}
