import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// The built `herald serve` as a child process, killed with SIGKILL between the moment the log
/// transport wrote a batch and the moment its outcome was committed, then started again: the
/// log transport's ledger settles that batch (its lines stay written once), the rest is sent,
/// and every delivery ends `delivered`.
///
/// The kill lands inside that window every time: the first daemon runs under `strace`, which
/// lets every `write` to the log file reach the file and then holds the writing thread at the
/// system call's exit (`inject=…:delay_exit`), so the batch is in the file and its outcome cannot
/// have been committed. No hook in the daemon is needed.
@Suite(.serialized) struct DurabilityTests {
    static let key = "durability-key-0123456789"
    static let strace = "/usr/bin/strace"
    static let devices = 6, batchSize = 4

    func config(_ dir: TemporaryDirectory) throws -> String {
        try dir.write("config.json", """
        {
          "storage": {"path": "herald.db", "synchronous": "full"},
          "apps": {"com.example.app": {"routes": ["dry"]}},
          "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
          "delivery": {"batchSize": \(Self.batchSize)},
          "server": {"concurrency": 1, "batchLinger": 0},
          "log": {"level": "info", "format": "json"}
        }
        """)
    }

    /// Starts `herald serve` (under `strace` holding every write to `heldWrites`, when given).
    func start(_ path: String, _ dir: TemporaryDirectory, holdingWritesTo heldWrites: String? = nil) async throws -> (ChildProcess, HTTPTestClient) {
        let herald = ["serve", "--config", path]
        let child: ChildProcess
        if let heldWrites {
            // -P: only system calls on the log file; delay_exit: the write is done, the thread
            // waits 10 minutes before it may return (it is killed long before).
            let writes = "write,writev,pwrite64,pwritev,pwritev2"
            child = try ChildProcess(Self.strace, ["-f", "-qq", "-o", "/dev/null", "-P", heldWrites, "-e", "trace=\(writes)",
                                                   "-e", "inject=\(writes):delay_exit=600000000", PackagePaths.heraldBinary] + herald,
                                     environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        } else {
            child = try ChildProcess.herald(herald, environment: ["HERALD_API_KEY": Self.key], directory: dir.path)
        }
        guard let port = await child.listeningPort(timeout: 60) else {
            child.terminate()
            throw HTTPTestClient.Failure(description: "herald serve did not start: \(child.stderr)")
        }
        return (child, HTTPTestClient(port: port, key: Self.key))
    }

    /// The process whose parent is `parent` (herald under strace).
    func childPID(of parent: Int32) -> Int32? {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for entry in entries {
            guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // After "(comm)": state, then the parent's pid.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == parent { return pid }
        }
        return nil
    }

    /// Whether `pid` has exited (gone, or a zombie nobody reaped).
    func isGone(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(after: close)...].split(separator: " ").first == "Z"
    }

    @Test(.timeLimit(.minutes(3))) func killBetweenTheLogWriteAndItsCommitDeliversOnceFromTheLedger() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary), "build herald first: swift build")
        try #require(FileManager.default.isExecutableFile(atPath: Self.strace), "strace is missing: run scripts/bootstrap.sh")
        let dir = try TemporaryDirectory(prefix: "herald-kill9")
        defer { dir.remove() }
        let path = try config(dir)
        let log = dir.file("deliveries.jsonl")
        FileManager.default.createFile(atPath: log, contents: nil)
        func lines() -> [String] {
            // Whole lines only (a line is written with its newline in one call).
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            return text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        }

        let (held, heldClient) = try await start(path, dir, holdingWritesTo: log)
        defer { held.terminate() }
        let tracedHerald = try #require(await eventually(timeout: 10) { childPID(of: held.pid) != nil } ? childPID(of: held.pid) : nil,
                                        "no herald process under strace")
        defer { kill(tracedHerald, SIGKILL) }   // before strace lets go of it
        for k in 1...Self.devices {
            let r = try await heldClient.post("/v1/devices", #"{"app":"com.example.app","user":"u","token":"\#(TestDaemon.token(k))"}"#)
            #expect(r.status == 201)
        }
        let accepted = try await heldClient.post("/v1/notifications", #"{"app":"com.example.app","users":["u"],"alert":"once"}"#)
        #expect(accepted.status == 202)
        let id = try #require(accepted.json?["id"]?.stringValue)

        // The first batch (batchSize deliveries, one write) reaches the file; its thread is held.
        #expect(await eventually(timeout: 30) { lines().count == Self.batchSize }, "the first batch was not written: \(held.stderr)")
        // The window: the batch is in the file but the queue still has it `sent` (no outcome committed),
        // and with one batch in flight the rest is still `queued`.
        let before = try await heldClient.get("/v1/notifications/\(id)")
        let statesBefore = before.json?["deliveries"]?.arrayValue?.compactMap { $0["state"]?.stringValue }.sorted() ?? []
        #expect(statesBefore == Array(repeating: "queued", count: Self.devices - Self.batchSize) + Array(repeating: "sent", count: Self.batchSize))
        let writtenAtKill = lines()
        #expect(writtenAtKill.count == Self.batchSize)

        // SIGKILL is pending on herald before strace (killed next) lets go of it, so the held
        // thread never returns from its write.
        kill(tracedHerald, SIGKILL)
        held.signal(SIGKILL)
        #expect(await held.waitForExit(timeout: 30) != nil, "strace did not exit")
        #expect(await eventually(timeout: 30) { isGone(tracedHerald) }, "herald (pid \(tracedHerald)) still runs after SIGKILL")

        let (child, client) = try await start(path, dir)
        defer { child.terminate() }
        let finished = await eventually(timeout: 60) {
            let r = try? await client.get("/v1/notifications/\(id)")
            let states = r?.json?["deliveries"]?.arrayValue?.compactMap { $0["state"]?.stringValue } ?? []
            return states == Array(repeating: "delivered", count: Self.devices)
        }
        #expect(finished, "not every delivery ended delivered: \(child.stderr)")

        // The ledger settled the written batch: no line written twice, nothing sent again.
        let after = lines()
        #expect(after.count == Self.devices)
        #expect(Array(after.prefix(Self.batchSize)) == writtenAtKill, "the lines written before the kill changed")
        var perDelivery: [String: Int] = [:]   // apns-id → lines
        for line in after {
            let json = try JSONValue.parse(line)
            #expect(json["notification_id"]?.stringValue == id)
            let apnsID = try #require(json["headers"]?["apns-id"]?.stringValue)
            perDelivery[apnsID, default: 0] += 1
        }
        #expect(perDelivery.count == Self.devices && perDelivery.values.allSatisfy { $0 == 1 }, "written twice: \(perDelivery)")
        let status = try await client.get("/v1/notifications/\(id)")
        let deliveries = status.json?["deliveries"]?.arrayValue ?? []
        #expect(Set(deliveries.compactMap { $0["apns_id"]?.stringValue }) == Set(perDelivery.keys))
        #expect(deliveries.allSatisfy { $0["attempts"]?.intValue == 1 }, "a delivery was attempted twice: \(deliveries)")

        // And the daemon says it settled them from the ledger rather than sending them again.
        let settled = try #require(child.stderr.split(separator: "\n").compactMap { try? JSONValue.parse(String($0)) }
            .first { $0["msg"]?.stringValue == "settled deliveries interrupted by a restart" }, "no settlement logged: \(child.stderr)")
        #expect(settled["interrupted"]?.stringValue == String(Self.batchSize))
        #expect(settled["confirmed"]?.stringValue == String(Self.batchSize))
        #expect(settled["sent_again"]?.stringValue == "0")

        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 20) == 0)
    }
}
