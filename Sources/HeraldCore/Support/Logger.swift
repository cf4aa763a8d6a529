import FoundationEssentials
import Glibc

/// Herald's logger: one line per event, in logfmt or JSON, with a level filter.
///
/// Modelled on swift-log's split: `Logger` is the value callers hold and pass down; a
/// ``LogHandler`` decides where lines go. Libraries take a logger from their caller and never
/// make their own.
///
/// - Important: never put a secret in a message or metadata value; shorten device tokens with
///   ``Redact/token(_:)``.
public struct Logger: Sendable {
    /// Severity, lowest first.
    public enum Level: String, CaseIterable, Comparable, Sendable {
        case trace, debug, info, notice, warning, error, critical

        private var rank: Int { Self.allCases.firstIndex(of: self)! }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    /// The component that logs (`dispatcher`, `transport.apns`).
    public var label: String
    /// Lines below this level are dropped before their message is built.
    public var logLevel: Level
    /// Key-value pairs added to every line of this logger.
    public var metadata: [String: String]
    private let handler: any LogHandler

    public init(label: String, level: Level = .info, metadata: [String: String] = [:],
                handler: any LogHandler = StreamLogHandler.standardError(format: .logfmt)) {
        self.label = label
        self.logLevel = level
        self.metadata = metadata
        self.handler = handler
    }

    /// A logger that drops everything.
    public static var disabled: Logger { Logger(label: "disabled", level: .critical, handler: DiscardLogHandler()) }

    /// A copy with another label (same handler, level and metadata).
    public func labeled(_ label: String) -> Logger {
        var copy = self
        copy.label = label
        return copy
    }

    /// A copy with extra metadata on every line.
    public func with(_ extra: [String: String]) -> Logger {
        var copy = self
        copy.metadata.merge(extra) { _, new in new }
        return copy
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String,
                    _ metadata: @autoclosure () -> [String: String] = [:]) {
        guard level >= logLevel else { return }
        var merged = self.metadata
        merged.merge(metadata()) { _, new in new }
        handler.emit(LogRecord(time: Date(), level: level, label: label, message: message(), metadata: merged))
    }

    public func trace(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.trace, message(), metadata()) }
    public func debug(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.debug, message(), metadata()) }
    public func info(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.info, message(), metadata()) }
    public func notice(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.notice, message(), metadata()) }
    public func warning(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.warning, message(), metadata()) }
    public func error(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.error, message(), metadata()) }
    public func critical(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> [String: String] = [:]) { log(.critical, message(), metadata()) }
}

/// One log event.
public struct LogRecord: Sendable {
    public var time: Date
    public var level: Logger.Level
    public var label: String
    public var message: String
    public var metadata: [String: String]

    public init(time: Date, level: Logger.Level, label: String, message: String, metadata: [String: String]) {
        self.time = time
        self.level = level
        self.label = label
        self.message = message
        self.metadata = metadata
    }
}

/// Where log lines go. Implementations must be thread-safe.
public protocol LogHandler: Sendable {
    func emit(_ record: LogRecord)
}

/// Drops every record.
public struct DiscardLogHandler: LogHandler {
    public init() {}
    public func emit(_ record: LogRecord) {}
}

/// Line formats of ``StreamLogHandler``.
public enum LogFormat: String, CaseIterable, Sendable {
    /// `time=… level=info label=dispatcher msg="delivered" token=1f2e3d4c…`
    case logfmt
    /// One JSON object per line: `{"time":…,"level":"info","label":…,"msg":…,…}`.
    case json

    /// Renders one record as a line (with the trailing newline).
    public func render(_ record: LogRecord) -> String {
        switch self {
        case .json:
            var w = JSONWriter(capacity: 160)
            w.object { o in
                o.string("time", record.time.iso8601)
                o.string("level", record.level.rawValue)
                o.string("label", record.label)
                o.string("msg", record.message)
                for key in record.metadata.keys.sorted() where !["time", "level", "label", "msg"].contains(key) {
                    o.string(key, record.metadata[key])
                }
            }
            return w.string + "\n"
        case .logfmt:
            var line = "time=\(record.time.iso8601) level=\(record.level.rawValue) label=\(Self.logfmtValue(record.label)) msg=\(Self.logfmtValue(record.message))"
            for key in record.metadata.keys.sorted() {
                line += " \(key)=\(Self.logfmtValue(record.metadata[key]!))"
            }
            return line + "\n"
        }
    }

    static func logfmtValue(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0 == "\n" || $0 == "\t" }
        guard needsQuotes else { return value }
        var out = "\""
        for ch in value {
            switch ch {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            default: out.append(ch)
            }
        }
        return out + "\""
    }
}

/// Writes formatted lines to standard error, standard output or another open file descriptor.
public final class StreamLogHandler: LogHandler {
    private let format: LogFormat
    private let fd: Int32
    private let lock = Locked(())

    /// - Parameter fd: where lines go; the handler does not close it.
    public init(format: LogFormat, fileDescriptor fd: Int32) {
        self.format = format
        self.fd = fd
    }

    /// Lines to standard error (the default for the daemon and the CLI).
    public static func standardError(format: LogFormat) -> StreamLogHandler {
        StreamLogHandler(format: format, fileDescriptor: 2)
    }

    public func emit(_ record: LogRecord) {
        let line = Array(format.render(record).utf8)
        lock.withLock { _ in FileDescriptorOutput.write(line, to: fd) }
    }
}
