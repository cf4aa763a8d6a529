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
    ///
    /// Every value is escaped so that a line stays one line and shows only what it says: control
    /// characters (C0, DEL, C1), line and paragraph separators, bidirectional overrides and the
    /// replacement character that marks invalid UTF-8 in the input are written as `\u001b`-style
    /// escapes (plus `\n`, `\r`, `\t`, `\"` and `\\`), in both formats. Values come from
    /// strangers (a Matrix `app_id`, a path), so nothing they send can forge a line or drive a terminal.
    public func render(_ record: LogRecord) -> String {
        switch self {
        case .json:
            var line = "{"
            var first = true
            func member(_ key: String, _ value: String) {
                if !first { line += "," }
                first = false
                LogEscaping.appendJSONString(key, to: &line)
                line += ":"
                LogEscaping.appendJSONString(value, to: &line)
            }
            member("time", record.time.iso8601)
            member("level", record.level.rawValue)
            member("label", record.label)
            member("msg", record.message)
            for key in record.metadata.keys.sorted() where !["time", "level", "label", "msg"].contains(key) {
                member(key, record.metadata[key]!)
            }
            return line + "}\n"
        case .logfmt:
            var line = "time=\(record.time.iso8601) level=\(record.level.rawValue) label=\(Self.logfmtValue(record.label)) msg=\(Self.logfmtValue(record.message))"
            for key in record.metadata.keys.sorted() {
                line += " \(LogEscaping.logfmtKey(key))=\(Self.logfmtValue(record.metadata[key]!))"
            }
            return line + "\n"
        }
    }

    /// A logfmt value: bare when it has no space, `=`, `"`, `\\` or character to escape;
    /// else quoted, with ``LogEscaping`` escapes.
    static func logfmtValue(_ value: String) -> String {
        let bare = !value.isEmpty && value.unicodeScalars.allSatisfy { s in
            s.value > 0x20 && s != "=" && s != "\"" && s != "\\" && !LogEscaping.mustEscape(s)
        }
        if bare { return value }
        var out = "\""
        LogEscaping.appendEscaped(value, to: &out)
        return out + "\""
    }
}

/// The escaping shared by both log formats.
enum LogEscaping {
    /// Whether a scalar is written as an escape: C0, DEL, C1, U+2028/U+2029, the bidirectional
    /// controls (U+061C, U+200E, U+200F, U+202A…U+202E, U+2066…U+2069), U+FEFF, and U+FFFD
    /// (what invalid UTF-8 became when the text was decoded).
    static func mustEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7f...0x9f, 0x2028, 0x2029, 0x061c, 0x200e, 0x200f, 0x202a...0x202e, 0x2066...0x2069, 0xfeff, 0xfffd:
            return true
        default:
            return false
        }
    }

    /// Appends `value` with `"`, `\\`, `\n`, `\r`, `\t` and every ``mustEscape(_:)`` scalar escaped
    /// (`\u001b`); valid inside a JSON string and a quoted logfmt value.
    static func appendEscaped(_ value: String, to out: inout String) {
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if mustEscape(scalar) {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
    }

    /// A quoted JSON string.
    static func appendJSONString(_ value: String, to out: inout String) {
        out += "\""
        appendEscaped(value, to: &out)
        out += "\""
    }

    /// A logfmt key: letters, digits, `_`, `.`, `-` and `:`; anything else becomes `_`.
    static func logfmtKey(_ key: String) -> String {
        let ok = !key.isEmpty && key.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a)
                || b == UInt8(ascii: "_") || b == UInt8(ascii: ".") || b == UInt8(ascii: "-") || b == UInt8(ascii: ":")
        }
        if ok { return key }
        if key.isEmpty { return "_" }
        return String(String.UnicodeScalarView(key.unicodeScalars.map { s in
            s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || "_.-:".unicodeScalars.contains(s)) ? s : "_"
        }))
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
