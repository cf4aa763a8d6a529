import Foundation
import HeraldAPNs
import HeraldCore
import HeraldLogTransport
import HeraldPostgres
import HeraldSQLite
import HeraldTestKit
import Testing

/// What only a shared PostgreSQL queue does: several nodes on one database.
struct PostgresSharedQueueTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)

    func configuration(_ storage: String) throws(ConfigurationError) -> HeraldConfiguration {
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        registry.register(storage: PostgresStorageConfiguration.self)
        registry.register(storage: SQLiteStorageConfiguration.self)
        return try HeraldConfiguration.parse(Data(#"{"storage": \#(storage), "apps": {"app": {"routes": ["t"]}}, "transports": {"t": {"type": "log"}}}"#.utf8),
                                             baseDirectory: "/tmp", registry: registry, environment: ["PGPASS": "s3cret"])
    }

    func configuration(url: String) throws -> HeraldConfiguration {
        try configuration(#"{"driver": "postgresql", "url": "\#(url)", "pool": 3}"#)
    }

    func notification(_ id: String, tokens: Int) -> QueuedNotification {
        QueuedNotification(id: id, app: "app", topic: "app", content: NotificationContent(alert: .text("hi")), idempotencyKey: nil,
                           createdAt: t0, deliveries: (0..<tokens).map {
                               PlannedDelivery(token: String(format: "%04x", $0), user: "u", transport: "t", messageID: UUID())
                           })
    }

    /// Opens `count` nodes on one fresh database; closes them on every path.
    func withNodes(_ count: Int, _ body: ([OpenStorage], String) async throws -> Void) async throws {
        let url = try await PostgresServer.shared().createDatabase()
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
                            // Past the accepting node's affinity: every node may take every row.
                            let c = try await node.queue.claim(transport: "t", limit: 7, now: self.t0.addingTimeInterval(1),
                                                               leaseUntil: self.t0.addingTimeInterval(60))
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

    @Test func aNodeClaimsItsOwnAcceptsFirstAndAnyNodeAfterTheAffinity() async throws {
        try await withNodes(2) { nodes, _ in
            let a = nodes[0].queue, b = nodes[1].queue
            _ = try await a.enqueue(notification("mine", tokens: 2), idempotencySince: t0)
            // B leaves A's fresh accepts to A, and knows when it may take them.
            #expect(try await b.claim(transport: "t", limit: 10, now: t0, leaseUntil: t0.addingTimeInterval(60)).isEmpty)
            #expect(try await b.nextDue(transport: "t") == t0.addingTimeInterval(1))
            #expect(try await a.nextDue(transport: "t") == t0)
            let own = try await a.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(0.5))
            #expect(own.count == 1)
            // A lease that ran out makes its delivery anyone's at once.
            #expect(try await b.reclaimExpiredLeases(now: t0.addingTimeInterval(0.5)) == 1)
            let reclaimed = try await b.claim(transport: "t", limit: 10, now: t0.addingTimeInterval(0.5), leaseUntil: t0.addingTimeInterval(60))
            #expect(reclaimed.map(\.delivery.id) == own.map(\.delivery.id))
            // What A did not claim, B takes once the affinity is over (a node that died or falls behind).
            let rest = try await b.claim(transport: "t", limit: 10, now: t0.addingTimeInterval(1), leaseUntil: t0.addingTimeInterval(60))
            #expect(rest.count == 1)
            #expect(Set((own + rest).map(\.delivery.id)).count == 2)
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

    @Test func keyLessAcceptsTakeOneStatementPerGroupCommit() async throws {
        try await withNodes(1) { nodes, _ in
            let queue = try #require(nodes[0].queue as? PostgresDeliveryQueue)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<40 {
                    group.addTask { _ = try await queue.enqueue(self.notification("n\(i)", tokens: 1 + i % 3), idempotencySince: self.t0) }
                }
                try await group.waitForAll()
            }
            // The batch statement (notifications, deliveries and wake-ups) committed every group
            // on its own: no BEGIN, no per-accept fallback, no COMMIT; it was prepared once.
            let stats = queue.commitStatistics
            #expect(stats.operations == 40)
            #expect(stats.roundTrips == stats.commits + 1)
            let status = try #require(try await queue.status(notificationID: "n5"))
            #expect(status.deliveries.count == 3)
            #expect(status.deliveries.allSatisfy { $0.state == .queued && $0.transport == "t" })
        }
    }

    @Test func contentWithQuotesAndBackslashesSurvivesTheArraysOnEveryClaimPath() async throws {
        try await withNodes(2) { nodes, _ in
            let content = NotificationContent(alert: .text(#"say "hi" \ {a,b} NULL é 🎉"#), data: ["k": .string(#"\"q\""#)])
            func tricky(_ id: String) -> QueuedNotification {
                var n = notification(id, tokens: 2)
                n.content = content
                n.deliveries[0].user = #"u"\,{}"#
                return n
            }
            // Claimed by another node (past the accepting node's affinity): read back from the
            // stored row (no cached copy there).
            _ = try await nodes[0].queue.enqueue(tricky("n1"), idempotencySince: t0)
            let there = try await nodes[1].queue.claim(transport: "t", limit: 10, now: t0.addingTimeInterval(1), leaseUntil: t0.addingTimeInterval(60))
            // Claimed by the accepting node: its cached copy for the first claim of each delivery.
            _ = try await nodes[0].queue.enqueue(tricky("n2"), idempotencySince: t0)
            let first = try await nodes[0].queue.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(60))
            let second = try await nodes[0].queue.claim(transport: "t", limit: 1, now: t0, leaseUntil: t0.addingTimeInterval(60))
            let all = there + first + second
            #expect(all.map(\.delivery.notificationID) == ["n1", "n1", "n2", "n2"])
            #expect(all.allSatisfy { $0.delivery.content == content && $0.delivery.payload == .unrendered })
            #expect(all.filter { $0.delivery.token == "0000" }.map(\.delivery.user) == [#"u"\,{}"#, #"u"\,{}"#])
        }
    }

    @Test func anExistingDatabaseLosesTheForeignKeyAndPruneStillRemovesDeliveries() async throws {
        let server = try await PostgresServer.shared()
        let url = try await server.createDatabase()
        let db = String(url.split(separator: "/").last!)
        let configuration = try configuration(url: url)
        let foreignKeys = "SELECT count(*) FROM pg_constraint WHERE conrelid = 'deliveries'::regclass AND contype = 'f'"
        _ = try await PostgresStorageDriver().migrate(configuration)
        #expect(try await server.query(db, foreignKeys).trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        // A database from before step 5: the foreign key of schema step 1 in place, no `accepted_by`
        // (and steps 6 to 10 undone: the environment columns and `apns_id` as they were, no `stream_device`, no `history`,
        // no channels, no event outbox).
        _ = try await server.query(db, """
            ALTER TABLE devices ADD COLUMN environment TEXT NOT NULL DEFAULT 'production' CHECK (environment IN ('sandbox', 'production'));
            ALTER TABLE devices DROP COLUMN attributes;
            ALTER TABLE deliveries ADD COLUMN environment TEXT NOT NULL DEFAULT 'production';
            ALTER TABLE deliveries RENAME COLUMN message_id TO apns_id;
            ALTER TABLE deliveries DROP COLUMN receipt;
            ALTER TABLE deliveries ADD CONSTRAINT deliveries_notification_fkey FOREIGN KEY (notification) REFERENCES notifications (seq) ON DELETE CASCADE;
            DROP INDEX deliveries_leased;
            CREATE INDEX deliveries_claimed ON deliveries (lease_until) WHERE state = 'sent';
            ALTER TABLE deliveries DROP COLUMN accepted_by;
            DROP INDEX deliveries_parked_stream;
            ALTER TABLE deliveries DROP COLUMN stream_device;
            ALTER TABLE deliveries DROP COLUMN history;
            DROP TABLE channels;
            DROP TABLE events;
            DROP TABLE webhook_cursors;
            DROP TABLE events_sequence;
            DELETE FROM herald_schema WHERE version >= 5
            """)
        #expect(try await server.query(db, foreignKeys).trimmingCharacters(in: .whitespacesAndNewlines) == "1")
        _ = try await PostgresStorageDriver().migrate(configuration)
        #expect(try await server.query(db, foreignKeys).trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        #expect(try await server.query(db, "SELECT indexname FROM pg_indexes WHERE tablename = 'deliveries' ORDER BY 1").split(separator: "\n")
            .map(String.init) == ["deliveries_by_notification", "deliveries_due", "deliveries_leased", "deliveries_parked", "deliveries_parked_stream",
                      "deliveries_pkey"])

        let node = try await PostgresStorageDriver().open(configuration, metrics: MetricsRegistry(), exclusive: true)
        do {
            for id in ["old", "kept"] { _ = try await node.queue.enqueue(notification(id, tokens: 3), idempotencySince: t0) }
            let claimed = try await node.queue.claim(transport: "t", limit: 3, now: t0, leaseUntil: t0.addingTimeInterval(60))
            try await node.queue.complete(claimed.map { .finished($0.delivery, .delivered, reason: nil) }, now: t0)
            #expect(try await node.queue.prune(createdBefore: t0.addingTimeInterval(1)) == 3)
            // The pruned notification's deliveries went with it; the unfinished one's stayed.
            #expect(try await server.query(db, "SELECT count(*) FROM deliveries").trimmingCharacters(in: .whitespacesAndNewlines) == "3")
            #expect(try await node.queue.status(notificationID: "old") == nil)
            #expect(try await node.queue.status(notificationID: "kept")?.deliveries.count == 3)
        } catch {
            await node.close()
            throw error
        }
        await node.close()
    }

    @Test func nodesStartingAtOnceOnAnEmptyDatabaseMigrateOnce() async throws {
        let server = try await PostgresServer.shared()
        let url = try await server.createDatabase()
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
        #expect(try await server.query(db, "SELECT count(*) FROM herald_schema").trimmingCharacters(in: .whitespacesAndNewlines) == latest)
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
        let storage = try c.postgresStorage()
        #expect(storage.url == "postgresql://herald:s3cret@127.0.0.1:1/herald" && storage.pool == 8)
        #expect(Redact.connectionString(storage.url) == "postgresql://herald:***@127.0.0.1:1/herald")
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
