import Foundation
import HeraldAPNs
import HeraldCore
import HeraldLogTransport
import HeraldTestKit
import Testing

@Suite struct LogTransportTests {
    @Test func appendsOneJSONLinePerDelivery() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let clock = TestClock()
        let path = dir.file("out/deliveries.jsonl")
        let transport = try LogTransport(name: "dry", configuration: .init(path: path),
                                         context: TransportContext(logger: .disabled, clock: clock))
        var content = NotificationContent(alert: .text("Hello"), badge: 2, data: ["order": 42])
        content.apns.pushType = .voip
        content.apns.collapseID = "c1"
        content.apns.expiration = 0
        let apnsID = UUID()
        let delivery = Delivery(id: 7, notificationID: "n1", app: "com.example.app", topic: "com.example.app",
                                token: String(repeating: "ab", count: 32), user: "alice",
                                transport: "dry", messageID: apnsID, content: content)
        let outcomes = await transport.deliver([delivery, delivery])
        #expect(outcomes == [.delivered(receipt: nil, evidence: "written to \(path)"), .delivered(receipt: nil, evidence: "written to \(path)")])
        await transport.shutdown()
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2)
        let record = try JSONValue.parse(String(lines[0]))
        #expect(record["token"]?.stringValue == String(repeating: "ab", count: 32))
        #expect(record["user"]?.stringValue == "alice")
        #expect(record["delivery_id"]?.intValue == 7)
        #expect(record["time"]?.stringValue == clock.now.iso8601)
        #expect(record["headers"]?["apns-topic"]?.stringValue == "com.example.app.voip")
        #expect(record["headers"]?["apns-push-type"]?.stringValue == "voip")
        #expect(record["headers"]?["apns-priority"]?.stringValue == "10")
        #expect(record["headers"]?["apns-expiration"]?.stringValue == "0")
        #expect(record["headers"]?["apns-collapse-id"]?.stringValue == "c1")
        #expect(record["headers"]?["apns-id"]?.stringValue == apnsID.uuidString.lowercased())
        #expect(record["payload"] == ["aps": ["alert": "Hello", "badge": 2], "herald_id": "n1", "order": 42])
    }

    @Test func appendsToAnExistingFile() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let path = try dir.write("d.jsonl", "{\"earlier\":true}\n")
        let transport = try LogTransport(name: "dry", configuration: .init(path: path), context: TransportContext(logger: .disabled))
        let d = Delivery(id: 1, notificationID: "n", app: "a", topic: "a", token: "00ff", user: nil, transport: "dry", content: NotificationContent(alert: .text("x")))
        _ = await transport.deliver([d])
        await transport.shutdown()
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2 && lines[0] == "{\"earlier\":true}")
    }

    @Test func configurationResolvesThePathAndCarriesAnyEnvironment() throws {
        let context = JSONReadContext(baseDirectory: "/etc/herald")
        let node = JSONNode(root: ["type": "log", "path": "var/d.jsonl"], context: context)
        let c = try #require(LogTransport.configuration(from: node))
        #expect(c.path == "/etc/herald/var/d.jsonl")
        #expect(c.platform == nil && c.canCarry(.apns(.sandbox)) && c.canCarry(.apns(.production)))
        let stdout = try #require(LogTransport.configuration(from: JSONNode(root: ["type": "log"], context: context)))
        #expect(stdout.path == nil && stdout.summary == "stdout")
    }

    @Test func anUnwritableFolderIsAClearError() {
        #expect(throws: TransportError.self) {
            try LogTransport(name: "dry", configuration: .init(path: "/proc/herald-cannot/d.jsonl"),
                             context: TransportContext(logger: .disabled))
        }
    }

    static func delivery(_ id: Int64 = 1) -> Delivery {
        Delivery(id: id, notificationID: "n\(id)", app: "com.example.app", topic: "com.example.app",
                 token: String(repeating: "cd", count: 32), user: nil, transport: "dry",
                 content: NotificationContent(alert: .text("x")))
    }

    /// A batch that reaches the transport after shutdown (a retired worker's straggler) must not
    /// write to the closed descriptor, whose number the next open file gets.
    @Test func afterShutdownNothingIsWrittenToTheDescriptorNumber() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let transport = try LogTransport(name: "dry", configuration: .init(path: dir.file("ledger.jsonl")),
                                         context: TransportContext(logger: .disabled))
        await transport.shutdown()
        // The lowest free descriptor: the one the transport just closed.
        let other = open(dir.file("other.db"), O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        #expect(other >= 0)
        defer { close(other) }
        let outcomes = await transport.deliver([Self.delivery()])
        guard case .retry(_, let reason)? = outcomes.first else {
            Issue.record("expected a retry, got \(outcomes)")
            return
        }
        #expect(reason.contains("shut down"))
        var info = stat()
        #expect(fstat(other, &info) == 0)
        #expect(info.st_size == 0, "the other file was written to")
    }

    /// With durable writes (storage.synchronous full) each batch is fsynced before `delivered`.
    @Test func durableWritesAreFsyncedBeforeDelivered() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let metrics = MetricsRegistry()
        let durable = try LogTransport(name: "dry", configuration: .init(path: dir.file("a.jsonl")),
                                       context: TransportContext(logger: .disabled, metrics: metrics, durableWrites: true))
        #expect(await durable.deliver([Self.delivery(1), Self.delivery(2)]).count == 2)
        #expect(await durable.deliver([Self.delivery(3)]).allSatisfy { if case .delivered = $0 { true } else { false } })
        #expect(metrics.value("herald_log_fsyncs_total", labels: [("transport", "dry")]) == 2)
        await durable.shutdown()

        let relaxed = MetricsRegistry()
        let fast = try LogTransport(name: "dry", configuration: .init(path: dir.file("b.jsonl")),
                                    context: TransportContext(logger: .disabled, metrics: relaxed))
        _ = await fast.deliver([Self.delivery()])
        #expect(relaxed.value("herald_log_fsyncs_total", labels: [("transport", "dry")]) == 0)
        await fast.shutdown()
    }

    /// Issue 24, item 18: `/dev/null`, a pipe or a terminal cannot be synced (`fsync` fails with
    /// EINVAL). That is not a failed write: every delivery is delivered, without fsync, and the
    /// log says once that the ledger is not durable on that file.
    func deliversWithoutFsync(path: String, read: (() -> String)? = nil) async throws {
        let logs = RecordingLogHandler()
        let metrics = MetricsRegistry()
        let transport = try LogTransport(name: "dry", configuration: .init(path: path),
                                         context: TransportContext(logger: Logger(label: "test", level: .debug, handler: logs),
                                                                   metrics: metrics, durableWrites: true))
        for n in 1...3 {
            let outcomes = await transport.deliver([Self.delivery(Int64(n))])
            #expect(outcomes.count == 1 && outcomes.allSatisfy { if case .delivered = $0 { true } else { false } },
                    "\(path): \(outcomes)")
        }
        #expect(!transport.fsyncsWrites)
        #expect(metrics.value("herald_log_fsyncs_total", labels: [("transport", "dry")]) == 0)
        let warnings = logs.records.filter { $0.message.contains("the ledger is not durable on this file") }
        #expect(warnings.count == 1, "\(logs.text)")
        #expect(warnings.first?.level == .warning)
        #expect(logs.text.contains("fsync=\"Invalid argument\""), "\(logs.text)")
        if let read { #expect(read().split(separator: "\n").count == 3) }
        await transport.shutdown()
    }

    @Test func devNullIsWrittenWithoutFsyncAndSaysSoOnce() async throws {
        try await deliversWithoutFsync(path: "/dev/null")
    }

    @Test func aPipeIsWrittenWithoutFsyncAndSaysSoOnce() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fifo = dir.file("deliveries.fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        // A reader first, so that the transport's open for writing does not wait for one.
        let reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        #expect(reader >= 0)
        defer { close(reader) }
        try await deliversWithoutFsync(path: fifo) {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            let n = read(reader, &buffer, buffer.count)
            return n > 0 ? String(decoding: buffer[..<n], as: UTF8.self) : ""
        }
    }

    /// A regular file is still fsynced with durable writes, and nothing is said.
    @Test func aRegularFileIsStillFsynced() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let logs = RecordingLogHandler()
        let transport = try LogTransport(name: "dry", configuration: .init(path: dir.file("d.jsonl")),
                                         context: TransportContext(logger: Logger(label: "test", level: .debug, handler: logs),
                                                                   durableWrites: true))
        #expect(transport.fsyncsWrites)
        _ = await transport.deliver([Self.delivery()])
        #expect(transport.fsyncsWrites)
        #expect(logs.records.isEmpty, "\(logs.text)")
        await transport.shutdown()
    }
}
