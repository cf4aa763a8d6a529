import FoundationEssentials
import Glibc

/// A problem found while reading JSON (a config file or an API body), with the JSON path of
/// the value it is about.
public struct JSONIssue: Sendable, Equatable, CustomStringConvertible {
    /// A JSONPath-like location: `transports.apns.keyFile`, `apps["com.example.app"].routes[1]`.
    public var path: String
    /// What was wrong and, where possible, what was expected.
    public var message: String

    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

/// Shared state of one JSON read: every error and warning (all are collected, not only the
/// first), the folder relative paths resolve against, and the keys each object's reader used.
public final class JSONReadContext {
    /// What to do with object keys no reader asked for.
    public enum UnknownKeys: Sendable {
        /// Warn (configuration files: a typo should not stop a deployment, but must be seen).
        case warn
        /// Fail (API bodies: clients should learn about a misspelt field at once).
        case reject
    }

    public private(set) var errors: [JSONIssue] = []
    public private(set) var warnings: [JSONIssue] = []
    /// A digest of the content of every file named by ``JSONNode/filePath(_:required:mustExist:)``,
    /// by the JSON path of its key: a reload compares them to see rotated keys and certificates.
    public private(set) var fileDigests: [String: UInt64] = [:]
    /// Folder relative file paths resolve against (the config file's folder).
    public let baseDirectory: String?
    public let unknownKeys: UnknownKeys
    fileprivate var trackers: [(path: String, keys: [String], tracker: KeyTracker)] = []

    public init(baseDirectory: String? = nil, unknownKeys: UnknownKeys = .warn) {
        self.baseDirectory = baseDirectory
        self.unknownKeys = unknownKeys
    }

    public func error(_ path: String, _ message: String) { errors.append(JSONIssue(path: path, message: message)) }

    /// Records the content digest of `file` under the JSON path `path` (FNV-1a, 64 bits; an
    /// unreadable file records 0 and its reader reports the error).
    func recordFile(_ path: String, _ file: String) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        if let data = FileManager.default.contents(atPath: file) {
            for byte in data {
                hash ^= UInt64(byte)
                hash = hash &* 0x0000_0100_0000_01b3
            }
        } else {
            hash = 0
        }
        fileDigests[path] = hash
    }
    public func warning(_ path: String, _ message: String) { warnings.append(JSONIssue(path: path, message: message)) }

    /// Reports keys that no reader used, as warnings or errors per ``unknownKeys``.
    /// Call once, after reading everything.
    public func reportUnknownKeys() {
        for entry in trackers {
            let used = entry.tracker.used
            for key in entry.keys.sorted() where !used.contains(key) {
                let path = JSONNode.childPath(entry.path, key)
                var message = unknownKeys == .warn ? "unknown key, ignored" : "unknown field"
                if let suggestion = Spelling.closest(to: key, in: entry.tracker.known.subtracting([key])) {
                    message += "; did you mean \"\(suggestion)\"?"
                }
                switch unknownKeys {
                case .warn: warning(path, message)
                case .reject: error(path, message)
                }
            }
        }
        trackers.removeAll()
    }

}

final class KeyTracker {
    var used: Set<String> = []
    /// Keys a reader declared as known although it did not read them this time.
    var known: Set<String> = []
}

/// A read-only cursor into a JSON document that knows its path and reports problems.
///
/// Readers ask for keys with typed accessors; a missing optional key gives `nil`, a value of the
/// wrong type records an error naming the path and what was expected (and also gives `nil`), so
/// one pass reports every problem. Keys nobody asked for are reported by
/// ``JSONReadContext/reportUnknownKeys()``.
///
/// Configuration readers (the core's and each transport plugin's) receive a `ConfigNode`.
public struct JSONNode {
    public let path: String
    public let value: JSONValue
    public let context: JSONReadContext
    private let tracker: KeyTracker?

    /// A root node over `value`; `path` names it in errors (a block read on its own, such as
    /// `apns`, reports `apns.priority`).
    public init(root value: JSONValue, context: JSONReadContext, path: String = "") {
        self.init(path: path, value: value, context: context)
    }

    init(path: String, value: JSONValue, context: JSONReadContext) {
        self.path = path
        self.value = value
        self.context = context
        if case .object(let members) = value {
            let tracker = KeyTracker()
            self.tracker = tracker
            context.trackers.append((path, Array(members.keys), tracker))
        } else {
            tracker = nil
        }
    }

    /// The JSON path of member `key` of the node at `parent` (`a.b`, or `a["odd key"]`).
    public static func childPath(_ parent: String, _ key: String) -> String {
        let isIdentifier = !key.isEmpty && key.first.map { $0.isLetter || $0 == "_" } == true
            && key.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }
        if isIdentifier { return parent.isEmpty ? key : "\(parent).\(key)" }
        let escaped = key.reduce(into: "") { out, c in if c == "\\" || c == "\"" { out.append("\\") }; out.append(c) }
        return "\(parent)[\"\(escaped)\"]"
    }

    /// The path of `key` below this node (for messages about a key).
    public func path(of key: String) -> String { Self.childPath(path, key) }

    // MARK: Reporting

    /// Records an error about this node.
    public func error(_ message: String) { context.error(path, message) }
    /// Records an error about `key` of this node.
    public func error(at key: String, _ message: String) { context.error(path(of: key), message) }
    /// Records a warning about this node.
    public func warning(_ message: String) { context.warning(path, message) }
    /// Records a warning about `key` of this node.
    public func warning(at key: String, _ message: String) { context.warning(path(of: key), message) }

    /// Declares keys as known without reading them (so they are not reported as unknown).
    public func allowKeys(_ keys: [String]) {
        tracker?.used.formUnion(keys.filter { value[$0] != nil })
        tracker?.known.formUnion(keys)
    }

    // MARK: Structure

    /// Whether this object has `key` (with a non-null value).
    public func has(_ key: String) -> Bool {
        if let v = value[key], v != .null { return true }
        return false
    }

    /// The node at `key`; `nil` when missing or null (an error when `required`).
    /// Records an error when this node is not an object.
    public func child(_ key: String, required: Bool = false) -> JSONNode? {
        guard case .object(let members) = value else {
            error("expected an object, found \(value.typeDescription)")
            return nil
        }
        tracker?.used.insert(key)
        tracker?.known.insert(key)
        guard let v = members[key], v != .null else {
            if required { error(at: key, "is required") }
            return nil
        }
        return JSONNode(path: path(of: key), value: v, context: context)
    }

    /// An object's members, sorted by key; all keys count as used.
    public func members() -> [(key: String, node: JSONNode)] {
        guard case .object(let members) = value else {
            error("expected an object, found \(value.typeDescription)")
            return []
        }
        tracker?.used.formUnion(members.keys)
        return members.keys.sorted().map { ($0, JSONNode(path: path(of: $0), value: members[$0]!, context: context)) }
    }

    /// An array's elements.
    public func elements() -> [JSONNode] {
        guard case .array(let items) = value else {
            error("expected an array, found \(value.typeDescription)")
            return []
        }
        return items.enumerated().map { JSONNode(path: "\(path)[\($0.offset)]", value: $0.element, context: context) }
    }

    // MARK: This node as a typed value

    /// This node as a string (an error when it is not one).
    public var asString: String? {
        guard case .string(let s) = value else { error("expected a string, found \(value.typeDescription)"); return nil }
        return s
    }

    /// This node as a boolean.
    public var asBool: Bool? {
        guard case .bool(let b) = value else { error("expected true or false, found \(value.typeDescription)"); return nil }
        return b
    }

    /// This node as an integer.
    public var asInt: Int? {
        guard let i = value.intValue else {
            error(value.doubleValue != nil ? "expected a whole number, found \(Self.render(value))" : "expected a whole number, found \(value.typeDescription)")
            return nil
        }
        return i
    }

    /// This node as a number.
    public var asDouble: Double? {
        guard let d = value.doubleValue else { error("expected a number, found \(value.typeDescription)"); return nil }
        return d
    }

    // MARK: Typed members

    /// A string member; with `nonEmpty`, an empty string is an error.
    public func string(_ key: String, required: Bool = false, nonEmpty: Bool = true) -> String? {
        guard let node = child(key, required: required), let s = node.asString else { return nil }
        if nonEmpty && s.isEmpty { node.error("must not be empty"); return nil }
        return s
    }

    /// A string member holding a secret (key, passphrase); never echoed in messages.
    public func secret(_ key: String, required: Bool = false) -> Secret? {
        guard let node = child(key, required: required) else { return nil }
        guard case .string(let s) = node.value else { node.error("expected a string, found \(node.value.typeDescription)"); return nil }
        if s.isEmpty { node.error("must not be empty"); return nil }
        return Secret(s)
    }

    /// An integer member, optionally within `range`.
    public func int(_ key: String, required: Bool = false, in range: ClosedRange<Int>? = nil) -> Int? {
        guard let node = child(key, required: required), let i = node.asInt else { return nil }
        if let range, !range.contains(i) {
            node.error("must be between \(range.lowerBound) and \(range.upperBound), found \(i)")
            return nil
        }
        return i
    }

    /// A number member, optionally within `range`.
    public func double(_ key: String, required: Bool = false, in range: ClosedRange<Double>? = nil) -> Double? {
        guard let node = child(key, required: required), let d = node.asDouble else { return nil }
        if let range, !range.contains(d) {
            node.error("must be between \(Self.render(.number(range.lowerBound))) and \(Self.render(.number(range.upperBound))), found \(Self.render(.number(d)))")
            return nil
        }
        return d
    }

    /// A boolean member.
    public func bool(_ key: String, required: Bool = false) -> Bool? {
        child(key, required: required)?.asBool
    }

    /// An array-of-strings member.
    public func stringArray(_ key: String, required: Bool = false, nonEmpty: Bool = false) -> [String]? {
        guard let node = child(key, required: required) else { return nil }
        guard case .array = node.value else { node.error("expected an array of strings, found \(node.value.typeDescription)"); return nil }
        var result: [String] = []
        var ok = true
        for element in node.elements() {
            if let s = element.asString { result.append(s) } else { ok = false }
        }
        if nonEmpty && result.isEmpty && ok { node.error("must not be empty"); return nil }
        return ok ? result : nil
    }

    /// A member that must be one of an enumeration's raw values.
    public func oneOf<E: RawRepresentable & CaseIterable>(_ key: String, _ type: E.Type, required: Bool = false) -> E?
    where E.RawValue == String {
        guard let node = child(key, required: required), let s = node.asString else { return nil }
        guard let e = E(rawValue: s) else {
            let known = E.allCases.map { $0.rawValue }.joined(separator: ", ")
            node.error("unknown value \"\(s)\"; expected one of: \(known)")
            return nil
        }
        return e
    }

    /// A duration member: a number of seconds, or a string such as `"250ms"`, `"30s"`, `"5m"`,
    /// `"2h"`, `"7d"`.
    public func duration(_ key: String, required: Bool = false, minimum: TimeInterval = 0) -> TimeInterval? {
        guard let node = child(key, required: required) else { return nil }
        let seconds: TimeInterval?
        switch node.value {
        case .number(let n): seconds = n
        case .string(let s): seconds = Self.parseDuration(s)
        default: seconds = nil
        }
        guard let seconds, seconds.isFinite else {
            node.error("expected a duration such as 30, \"30s\", \"5m\", \"2h\" or \"7d\", found \(Self.render(node.value))")
            return nil
        }
        if seconds < minimum {
            node.error("must be at least \(minimum) seconds")
            return nil
        }
        return seconds
    }

    /// Parses `"250ms"`, `"30s"`, `"5m"`, `"2h"`, `"7d"` or a bare number of seconds.
    public static func parseDuration(_ text: String) -> TimeInterval? {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        let t = text.trimmingWhitespace()
        for (suffix, factor) in units where t.hasSuffix(suffix) {
            let number = t.dropLast(suffix.count)
            // "ms" must win over "s"; skip "s" when the text is really "…ms".
            if suffix == "s" && number.hasSuffix("m") { continue }
            if let n = Double(number), n >= 0 { return n * factor }
            return nil
        }
        if let n = Double(t), n >= 0 { return n }
        return nil
    }

    /// A file path member resolved against the config's folder; with `mustExist`, a missing
    /// file is an error naming the resolved path.
    public func filePath(_ key: String, required: Bool = false, mustExist: Bool = true) -> String? {
        guard let raw = string(key, required: required) else { return nil }
        let resolved = resolve(raw)
        if mustExist {
            var isDirectory = false
            if !FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory) {
                error(at: key, "no such file \"\(resolved)\"")
                return nil
            }
            if isDirectory {
                error(at: key, "\"\(resolved)\" is a folder, expected a file")
                return nil
            }
            context.recordFile(Self.childPath(path, key), resolved)
        }
        return resolved
    }

    /// Resolves a path against the config file's folder (absolute paths stay as they are).
    public func resolve(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        guard let base = context.baseDirectory else { return path }
        return URL(fileURLWithPath: base).appendingPathComponent(path).standardizedFileURL.path
    }

    static func render(_ value: JSONValue) -> String {
        switch value {
        case .string(let s): return "\"\(s)\""
        default: return value.jsonString
        }
    }
}

/// The node type transport plugins read their configuration from.
public typealias ConfigNode = JSONNode
