import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// The `log` transport: appends each delivery as one JSON line to a file, or to standard output.
///
/// A real dry-run mode: deployments and tests see exactly what would have gone to APNs
/// (headers and payload) without a network. Every delivery is `delivered` once its line is
/// written: handed to the operating system (it survives a crash of Herald) and, when the host
/// asks for durable writes (`storage.synchronous: "full"`), fsynced (it survives a power loss
/// as the queue's commit does). A file that cannot be synced (`/dev/null`, a pipe, a terminal:
/// `fsync` fails with `EINVAL`, `ENOTSUP` or `EROFS`) is written without `fsync`, and the log
/// says once that the ledger is not durable on it. After ``shutdown()`` nothing is written: a late batch gets
/// `retry`, never a write to a descriptor that may by then belong to another file.
///
/// ```json
/// "dry": {"type": "log", "path": "var/deliveries.jsonl"}
/// ```
public final class LogTransport: TransportPlugin {
    /// The `log` transport's configuration.
    public struct Configuration: TransportConfiguration {
        /// File to append to, resolved against the config's folder; `nil` writes to stdout.
        public var path: String?

        /// A hex device token (the `log` route is a dry run of APNs), of any environment: a given
        /// one is checked and kept.
        public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
            let environment = attributes.apnsEnvironment ?? .production
            var address = try APNsRoute.address(input, attributes: attributes, environment: environment)
            if attributes[APNsEnvironment.attribute] == nil { address.attributes = DeviceAttributes() }
            return address
        }

        /// The payload APNs would get (the `log` route is a dry run of APNs), for any device address.
        public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
            var payload = try APNsRoute.render(content, context: context)
            payload.headers["apns-topic"] = APNsSendOptions(payload).pushType.topic(forBundleID: context.topic)
            return payload
        }
        public var summary: String { path ?? "stdout" }

        public init(path: String?) { self.path = path }
    }

    public static let overrideBlocks = [APNsOptions.block]

    public static let kind = "log"

    public static func configuration(from node: ConfigNode) -> Configuration? {
        Configuration(path: node.filePath("path", mustExist: false))
    }

    public let name: String
    let configuration: Configuration
    /// The file's descriptor (opened with O_APPEND), or standard output; `nil` once shut down.
    private let fd: Locked<Int32?>
    private let clock: any WallClock
    /// Whether each write is fsynced: durable writes asked for, a file named, and one that can be synced.
    private let syncs: Locked<Bool>
    private let logger: Logger
    private let fsyncs: Counter

    public init(name: String, configuration: Configuration, context: TransportContext) throws {
        self.name = name
        self.configuration = configuration
        self.clock = context.clock
        self.logger = context.logger
        fsyncs = context.metrics.counter("herald_log_fsyncs_total", help: "fsync calls of the log transport's file (with durable writes).",
                                         labels: [("transport", name)])
        let fd: Int32
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
        self.fd = Locked(fd)
        self.syncs = Locked(context.durableWrites && configuration.path != nil)
        if syncs.withLock({ $0 }) && fsync(fd) != 0 {
            let error = errno
            if Self.cannotSync(error) { notSyncable(error) }  // else the first write reports it
        }
    }

    /// Whether `error` from `fsync` means the file cannot be synced (a character device, pipe
    /// or terminal), not that a write was lost.
    static func cannotSync(_ error: Int32) -> Bool {
        error == EINVAL || error == ENOTSUP || error == EOPNOTSUPP || error == EROFS
    }

    /// Stops fsyncing a file that cannot be synced, saying so once.
    private func notSyncable(_ error: Int32) {
        let first = syncs.withLock { s -> Bool in defer { s = false }; return s }
        guard first else { return }
        logger.warning("log file cannot be synced; writing without fsync: the ledger is not durable on this file",
                       ["transport": name, "path": configuration.summary, "fsync": String(cString: strerror(error))])
    }

    public var preferredBatchSize: Int { 1000 }

    public func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] {
        // Rendered by the delivery engine; a caller that drives the transport directly gets the same render.
        let batch = batch.map { d -> Delivery in
            guard d.payload == .unrendered, let payload = try? configuration.render(d.content, context: d.renderContext) else { return d }
            var d = d
            d.payload = payload
            return d
        }
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
        return batch.map { _ in .delivered(receipt: nil, evidence: "written to \(configuration.summary)") }
    }

    /// Appends `bytes` (and fsyncs them with durable writes, on a file that can be synced); nil
    /// when written, else why not.
    private func write(_ bytes: [UInt8]) -> String? {
        var unsyncable: Int32? = nil
        let failure: String? = fd.withLock { fd in
            guard let fd else { return "the transport was shut down" }
            guard FileDescriptorOutput.write(bytes, to: fd) else { return String(cString: strerror(errno)) }
            if syncs.withLock({ $0 }) {
                if fsync(fd) == 0 {
                    fsyncs.increment()
                } else {
                    let error = errno
                    guard Self.cannotSync(error) else { return "fsync: \(String(cString: strerror(error)))" }
                    unsyncable = error
                }
            }
            return nil
        }
        if let unsyncable { notSyncable(unsyncable) }
        return failure
    }

    /// Whether writes are fsynced (false without durable writes, or on a file that cannot be synced).
    public var fsyncsWrites: Bool { syncs.withLock { $0 } }

    /// The JSON line written for one delivery: headers Herald would send and the payload.
    public static func line(for d: Delivery, transport: String, time: String) -> [UInt8] {
        var w = JSONWriter(capacity: 256 + d.payload.body.count)
        w.object { o in
            o.string("time", time)
            o.string("transport", transport)
            o.string("notification_id", d.notificationID)
            o.int64("delivery_id", d.id)
            o.string("app", d.app)
            o.string("token", d.token)
            if let user = d.user { o.string("user", user) }
            o.int("attempt", d.attempt)
            o.object("headers") { h in
                // The delivery's message id, under the header APNs would get it in (the ledger reads it back).
                h.string("apns-id", d.messageID.lowercasedString)
                for name in d.payload.headers.keys.sorted() { h.string(name, d.payload.headers[name]!) }
            }
            o.rawJSON("payload", d.payload.body)
        }
        return w.bytes
    }

    public func shutdown() async {
        fd.withLock { fd in
            if let open = fd, configuration.path != nil { close(open) }
            fd = nil
        }
    }

    public func checkReport() async -> [CheckFinding] {
        [CheckFinding(.ok, "appends deliveries to \(configuration.summary)")]
    }
}
