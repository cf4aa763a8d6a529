import Foundation
import HeraldCore
import HeraldLogTransport
import HeraldPostgres
import HeraldTestKit
import Testing

/// What only a shared PostgreSQL queue does: several nodes on one database.
struct PostgresSharedQueueTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func configuration(_ storage: String) throws(ConfigurationError) -> HeraldConfiguration {
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        return try HeraldConfiguration.parse(Data(#"{"storage": \#(storage), "apps": {"app": {"routes": ["t"]}}, "transports": {"t": {"type": "log"}}}"#.utf8),
                                             baseDirectory: "/tmp", registry: registry, environment: ["PGPASS": "s3cret"])
    }

    func configuration(url: String) throws -> HeraldConfiguration {
        try configuration(#"{"driver": "postgresql", "url": "\#(url)", "pool": 3}"#)
    }

    func notification(_ id: String, tokens: Int) -> QueuedNotification {
        QueuedNotification(id: id, app: "app", topic: "app", content: NotificationContent(alert: .text("hi")), idempotencyKey: nil,
                           createdAt: t0, deliveries: (0..<tokens).map {
                               PlannedDelivery(token: String(format: "%04x", $0), user: "u", transport: "t", environment: .production, apnsID: UUID())
                           })
    }

    /// Opens `count` nodes on one fresh database; closes them on every path.
    func withNodes(_ count: Int, _ body: ([OpenStorage], String) async throws -> Void) async throws {
        let url = try PostgresServer.shared().createDatabase()
        var nodes: [OpenStorage] = []
        do {
            for _ in 0..<count { nodes.append(try await PostgresStorageDriver().open(try configuration(url: url), metrics: MetricsRegistry(), exclusive: true)) }
            try await body(nodes, url)
        } catch {
            for n in nodes { await n.close() }
            throw error
        }
        for n in nodes { await n.close() }
    }

    @Test func nodesClaimingAtOnceNeverShareADelivery() async throws {
        try await withNodes(3) { nodes, _ in
            _ = try await nodes[0].queue.enqueue(notification("n1", tokens: 300), idempotencySince: t0)
            let claimed = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for node in nodes {
                    group.addTask {
                        var ids: [Int64] = []
                        while true {
                            let c = try await node.queue.claim(transport: "t", limit: 7, now: self.t0, leaseUntil: self.t0.addingTimeInterval(60))
                            if c.isEmpty { return ids }
                            ids += c.map(\.delivery.id)
                        }
                    }
                }
                return try await group.reduce(into: [[Int64]]()) { $0.append($1) }
            }
            #expect(claimed.joined().count == 300)
            #expect(Set(claimed.joined()).count == 300)
        }
    }

    @Test func aDeadNodesClaimsReturnOnlyAfterTheirLease() async throws {
        try await withNodes(2) { nodes, _ in
            let a = nodes[0].queue, b = nodes[1].queue
            _ = try await a.enqueue(notification("n1", tokens: 1), idempotencySince: t0)
            let lost = try await a.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(30))
            // Another node starting finds nothing "interrupted": a live node's claim looks the same.
            #expect(try await b.interrupted(transport: "t").isEmpty)
            #expect(try await b.reclaimExpiredLeases(now: t0.addingTimeInterval(29)) == 0)
            #expect(try await b.reclaimExpiredLeases(now: t0.addingTimeInterval(30)) == 1)
            let taken = try await b.claim(transport: "t", limit: 1, now: t0.addingTimeInterval(30), leaseUntil: t0.addingTimeInterval(60))
            #expect(taken.map(\.delivery.attempt) == [2])
            // The first node comes back and reports: fenced off.
            try await a.complete([.finished(lost[0].delivery, .failed, reason: "late")], now: t0.addingTimeInterval(31))
            try await b.complete([.finished(taken[0].delivery, .delivered, reason: nil)], now: t0.addingTimeInterval(31))
            #expect(try await a.status(notificationID: "n1")?.deliveries.map(\.state) == [.delivered])
        }
    }

    @Test func anEnqueueOnOneNodeWakesTheOthers() async throws {
        try await withNodes(2) { nodes, _ in
            let woken = AsyncStream<Set<String>>.makeStream()
            let wake = try #require(nodes[1].queue as? any QueueWakeSource)
            wake.onWake { woken.continuation.yield($0) }
            // The listener subscribes on its own thread: enqueue until the first wake-up arrives.
            let first: Set<String>? = await withTaskGroup(of: Set<String>?.self) { group in
                group.addTask {
                    var iterator = woken.stream.makeAsyncIterator()
                    return await iterator.next()
                }
                group.addTask {
                    for i in 0..<600 {
                        _ = try? await nodes[0].queue.enqueue(self.notification("n\(i)", tokens: 1), idempotencySince: self.t0)
                        try? await Task.sleep(for: .milliseconds(100))
                        if Task.isCancelled { break }
                    }
                    return nil
                }
                let r = await group.next() ?? nil
                group.cancelAll()
                woken.continuation.finish()
                return r
            }
            #expect(first == ["t"])
        }
    }

    @Test func nodesStartingAtOnceOnAnEmptyDatabaseMigrateOnce() async throws {
        let server = try PostgresServer.shared()
        let url = try server.createDatabase()
        let configuration = try configuration(url: url)
        let results = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<4 { group.addTask { try await PostgresStorageDriver().migrate(configuration) } }
            return try await group.reduce(into: [String]()) { $0.append($1) }
        }
        #expect(results.filter { $0.contains("migrated from version 0") }.count == 1)
        // "schema migrated from version 0 to N": every step applied once.
        let latest = try #require(results.first { $0.contains("from version 0") }?.components(separatedBy: " to ").last)
        #expect(results.filter { $0 != "schema migrated from version 0 to \(latest)" }.allSatisfy { $0 == "schema version \(latest): up to date" })
        let db = String(url.split(separator: "/").last!)
        #expect(try server.query(db, "SELECT count(*) FROM herald_schema").trimmingCharacters(in: .whitespacesAndNewlines) == latest)
        let findings = await PostgresStorageDriver().describe(configuration)
        #expect(findings.map(\.message).contains { $0.contains("server 15") || $0.contains("server 1") })
        #expect(findings.contains { $0.message.contains("schema version \(latest) (this Herald: \(latest)): up to date") })
    }

    @Test func configurationNamesWhatIsMissingAndNeverShowsThePassword() throws {
        func errors(_ storage: String) -> String {
            do { _ = try configuration(storage); return "" } catch { return error.description }
        }
        #expect(errors(#"{"driver": "postgresql"}"#).contains("storage.url: required for \"driver\": \"postgresql\""))
        #expect(errors(#"{"driver": "postgresql", "url": "x", "path": "a.db"}"#).contains("storage.path: only for \"driver\": \"sqlite\""))
        #expect(errors(#"{"url": "postgresql://h/db"}"#).contains("storage.url: only for \"driver\": \"postgresql\""))
        let c = try configuration(#"{"driver": "postgresql", "url": "postgresql://herald:${PGPASS}@127.0.0.1:1/herald"}"#)
        #expect(c.storage.url == "postgresql://herald:s3cret@127.0.0.1:1/herald" && c.storage.pool == 8)
        #expect(Redact.connectionString(c.storage.url!) == "postgresql://herald:***@127.0.0.1:1/herald")
        #expect(Redact.connectionString("host=db user=h password='a b' dbname=x") == "host=db user=h password=*** dbname=x")
        #expect(Redact.connectionString("postgresql://h@db/x?password=s3cret&sslmode=require") == "postgresql://h@db/x?password=***&sslmode=require")
    }

    @Test func anUnreachableServerIsUnavailableNotAFailure() async throws {
        let c = try configuration(url: "postgresql://herald:s3cret@127.0.0.1:1/herald?connect_timeout=2")
        await #expect { try await PostgresStorageDriver().openTokenStore(c) } throws: { error in
            error is StoreUnavailableError && !String(describing: error).contains("s3cret") && String(describing: error).contains("***")
        }
        let findings = await PostgresStorageDriver().describe(c)
        #expect(findings.first?.severity == .error && !findings.contains { $0.message.contains("s3cret") })
    }
}
