import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// The built `herald serve` as a child process, killed with SIGKILL while it accepts and
/// delivers, then started again: every accepted notification reaches the log transport's
/// file exactly once per device.
@Suite(.serialized) struct DurabilityTests {
    static let key = "durability-key-0123456789"

    func config(_ dir: TemporaryDirectory) throws -> String {
        try dir.write("config.json", """
        {
          "storage": {"path": "herald.db"},
          "apps": {"com.example.app": {"routes": ["dry"]}},
          "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
          "api": {"listen": "127.0.0.1:0", "keys": [{"id": "t", "secret": "${HERALD_API_KEY}", "scopes": ["admin"]}]},
          "delivery": {"batchSize": 4},
          "server": {"concurrency": 1, "batchLinger": 0},
          "log": {"level": "info"}
        }
        """)
    }

    func start(_ path: String, _ dir: TemporaryDirectory) async throws -> (ChildProcess, HTTPTestClient) {
        let child = try ChildProcess.herald(["serve", "--config", path], environment: ["HERALD_API_KEY": Self.key],
                                            directory: dir.path)
        guard let port = await child.listeningPort(timeout: 30) else {
            throw HTTPTestClient.Failure(description: "herald serve did not start: \(child.stderr)")
        }
        return (child, HTTPTestClient(port: port, key: Self.key))
    }

    @Test(.timeLimit(.minutes(3))) func killDashNineLosesAndDuplicatesNothing() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary), "build herald first: swift build")
        let dir = try TemporaryDirectory(prefix: "herald-kill9")
        defer { dir.remove() }
        let path = try config(dir)
        var (child, client) = try await start(path, dir)

        let users = 20, devicesPerUser = 3
        for u in 0..<users {
            for k in 0..<devicesPerUser {
                let token = TestDaemon.token(u * 16 + k + 1)
                let r = try await client.post("/v1/devices", #"{"app":"com.example.app","user":"user\#(u)","token":"\#(token)"}"#)
                #expect(r.status == 201)
            }
        }

        // Send until SIGKILL lands, while workers deliver. Ids answered 202 were accepted.
        let accepted = Locked<[String]>([])
        let firstClient = client
        // Four senders accept faster than one small-batch worker delivers, so a backlog builds up.
        let sender = Task.detached {
            await withTaskGroup(of: Void.self) { group in
                for lane in 0..<4 {
                    group.addTask {
                        var n = lane
                        while !Task.isCancelled {
                            let body = #"{"app":"com.example.app","users":["user\#(n % users)","user\#((n + 7) % users)"],"alert":"n\#(n)"}"#
                            n += 4
                            guard let r = try? await firstClient.post("/v1/notifications", body) else { return }
                            if r.status == 202, let id = r.json?["id"]?.stringValue { accepted.withLock { $0.append(id) } }
                        }
                    }
                }
            }
        }
        let log = dir.file("deliveries.jsonl")
        func lines() -> [String] {
            (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
        }
        // Kill once some notifications are accepted and some (not all) deliveries are written.
        _ = await eventually(timeout: 60) {
            let a = accepted.withLock { $0.count }, written = lines().count
            return a >= 150 && written >= 60 && a * 2 * devicesPerUser - written >= 120
        }
        child.signal(SIGKILL)
        _ = await child.waitForExit(timeout: 30)
        sender.cancel()
        _ = await sender.value
        let acceptedIDs = accepted.withLock { $0 }
        let writtenAtKill = lines().count
        #expect(acceptedIDs.count >= 150)

        // Restart: unfinished deliveries resume; the log transport's ledger settles the ones
        // that were written but not yet recorded.
        (child, client) = try await start(path, dir)
        defer { child.terminate() }
        let expected = acceptedIDs.count * 2 * devicesPerUser
        let finished = await eventually(timeout: 90) {
            let m = (try? await client.get("/metrics").text) ?? ""
            return m.contains(#"herald_queue_depth{transport="dry"} 0"#) && m.contains(#"herald_deliveries_in_flight{transport="dry"} 0"#)
        }
        #expect(finished)

        var seen: [String: Int] = [:]   // "notification token" → lines
        var apnsIDs = Set<String>()
        for line in lines() {
            guard let json = try? JSONValue.parse(line), let id = json["notification_id"]?.stringValue,
                  let token = json["token"]?.stringValue else {
                Issue.record("unreadable line: \(line.prefix(120))")
                continue
            }
            seen["\(id) \(token)", default: 0] += 1
            if let apnsID = json["headers"]?["apns-id"]?.stringValue { apnsIDs.insert(apnsID) }
        }
        let duplicates = seen.filter { $0.value > 1 }
        #expect(duplicates.isEmpty, "written twice: \(duplicates.prefix(5))")
        #expect(apnsIDs.count == seen.count)
        let ids = Set(seen.keys.map { String($0.split(separator: " ")[0]) })
        let missing = acceptedIDs.filter { !ids.contains($0) }
        #expect(missing.isEmpty, "accepted but never delivered: \(missing.prefix(5))")
        let deliveredForAccepted = seen.filter { acceptedIDs.contains(String($0.key.split(separator: " ")[0])) }.count
        #expect(deliveredForAccepted == expected)
        #expect(writtenAtKill < lines().count, "the kill should land before every delivery was written")

        // The API agrees: every delivery of an accepted notification is delivered, once.
        for id in acceptedIDs.prefix(20) {
            let status = try await client.get("/v1/notifications/\(id)")
            let states = status.json?["deliveries"]?.arrayValue?.compactMap { $0["state"]?.stringValue } ?? []
            #expect(states == Array(repeating: "delivered", count: 2 * devicesPerUser), "\(id): \(states)")
        }
        let settled = child.stderr.split(separator: "\n").first { $0.contains("settled deliveries interrupted") }
        print("kill -9: \(acceptedIDs.count) accepted, \(writtenAtKill) of \(lines().count) lines written at the kill; \(settled.map(String.init) ?? "nothing was in flight")")
        child.signal(SIGTERM)
        #expect(await child.waitForExit(timeout: 20) == 0)
    }
}
