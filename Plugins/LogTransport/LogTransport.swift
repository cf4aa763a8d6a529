import FoundationEssentials
import Glibc
import HeraldCore

/// The `log` transport: appends each delivery as one JSON line to a file, or to standard output.
///
/// A real dry-run mode: deployments and tests see exactly what would have gone to APNs
/// (headers and payload) without a network. Every delivery is `delivered` once its line is
/// written (handed to the operating system, so it survives a crash of Herald).
///
/// ```json
/// "dry": {"type": "log", "path": "var/deliveries.jsonl"}
/// ```
public final class LogTransport: TransportPlugin {
    /// The `log` transport's configuration.
    public struct Configuration: TransportConfiguration {
        /// File to append to, resolved against the config's folder; `nil` writes to stdout.
        public var path: String?
        public var environment: APNsEnvironment? { nil }
        public var summary: String { path ?? "stdout" }

        public init(path: String?) { self.path = path }
    }

    public static let kind = "log"

    public static func configuration(from node: ConfigNode) -> Configuration? {
        Configuration(path: node.filePath("path", mustExist: false))
    }

    public let name: String
    let configuration: Configuration
    /// The file's descriptor (opened with O_APPEND), or standard output.
    private let fd: Int32
    private let lock = Locked(())
    private let clock: any WallClock

    public init(name: String, configuration: Configuration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        self.clock = context.clock
        if let path = configuration.path {
            let fm = FileManager.default
            let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
            do {
                try fm.createDirectory(atPath: folder, withIntermediateDirectories: true)
            } catch {
                throw TransportError(transport: name, message: "cannot create folder \"\(folder)\" for the log file: \(SystemError.describe(error))")
            }
            fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw TransportError(transport: name, message: "cannot open \"\(path)\" for appending: \(String(cString: strerror(errno)))")
            }
        } else {
            fd = STDOUT_FILENO
        }
    }

    public var preferredBatchSize: Int { 1000 }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        var lines = [UInt8]()
        lines.reserveCapacity(batch.count * 400)
        let time = clock.now.iso8601
        for d in batch {
            lines += Self.line(for: d, transport: name, time: time)
            lines.append(UInt8(ascii: "\n"))
        }
        if let failure = write(lines) {
            let reason = "cannot write to \(configuration.summary): \(failure)"
            return batch.map { _ in .retry(after: nil, reason: reason) }
        }
        return batch.map { .delivered(apnsID: $0.apnsID.lowercasedString) }
    }

    /// Appends `bytes`; nil when written, else why not.
    private func write(_ bytes: [UInt8]) -> String? {
        lock.withLock { _ in
            FileDescriptorOutput.write(bytes, to: fd) ? nil : String(cString: strerror(errno))
        }
    }

    /// The JSON line written for one delivery: headers Herald would send and the payload.
    public static func line(for d: Delivery, transport: String, time: String) -> [UInt8] {
        var w = JSONWriter(capacity: 256 + d.payload.count)
        w.object { o in
            o.string("time", time)
            o.string("transport", transport)
            o.string("notification_id", d.notificationID)
            o.int64("delivery_id", d.id)
            o.string("app", d.app)
            o.string("token", d.token)
            if let user = d.user { o.string("user", user) }
            o.string("environment", d.environment.rawValue)
            o.int("attempt", d.attempt)
            o.object("headers") { h in
                h.string("apns-id", d.apnsID.lowercasedString)
                h.string("apns-push-type", d.content.pushType.rawValue)
                h.string("apns-topic", d.apnsTopic)
                h.string("apns-priority", String(d.content.priority))
                if let e = d.content.apns.expiration { h.string("apns-expiration", String(e)) }
                h.string("apns-collapse-id", d.content.apns.collapseID)
            }
            o.rawJSON("payload", d.payload)
        }
        return w.bytes
    }

    public func shutdown() async {
        lock.withLock { _ in
            if configuration.path != nil { close(fd) }
        }
    }

    public func checkReport() async -> [CheckFinding] {
        [CheckFinding(.ok, "appends deliveries to \(configuration.summary)")]
    }
}
