import FoundationEssentials
import Glibc

/// A JSON value as it appears in Herald's configuration, API bodies and custom payload data.
///
/// Objects keep no key order; ``JSONWriter`` writes their keys sorted, so output is deterministic.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Parses a complete JSON document strictly (``StrictJSON``: no duplicate keys, no trailing data).
    /// - Throws: ``JSONValue/ParseError`` saying what was wrong and where (line and column).
    /// A leading UTF-8 byte order mark (editors on Windows write one) is skipped.
    public static func parse(_ bytes: [UInt8]) throws(ParseError) -> JSONValue {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { return try parse(Array(bytes.dropFirst(3))) }
        do {
            return try StrictJSON.parse(bytes)
        } catch {
            let (line, column) = Self.position(of: error.offset, in: bytes)
            throw ParseError(message: "invalid JSON at line \(line), column \(column): \(error.message)")
        }
    }

    /// Parses a complete JSON document from data.
    public static func parse(_ data: Data) throws(ParseError) -> JSONValue {
        try parse([UInt8](data))
    }

    /// Parses a complete JSON document from a string.
    public static func parse(_ text: String) throws(ParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    /// A parse failure; `message` is safe to show to a user.
    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public let message: String
        public var description: String { message }
    }

    /// 1-based line and column (in bytes) of `offset`.
    private static func position(of offset: Int, in bytes: [UInt8]) -> (line: Int, column: Int) {
        var line = 1, lineStart = 0
        for i in 0..<min(offset, bytes.count) where bytes[i] == 0x0A { line += 1; lineStart = i + 1 }
        return (line, offset - lineStart + 1)
    }

    /// A short name of the value's type, for error messages ("a string", "an object").
    public var typeDescription: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o }; return nil }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var doubleValue: Double? { if case .number(let n) = self { return n }; return nil }
    /// The value as an integer when it is a number with no fractional part.
    public var intValue: Int? {
        if case .number(let n) = self, n.rounded() == n, abs(n) < 9.0e15 { return Int(n) }
        return nil
    }

    /// Member lookup on objects; `nil` for other types or a missing key.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// Compact JSON text of this value (object keys sorted).
    public var jsonString: String {
        var writer = JSONWriter()
        writer.write(self)
        return writer.string
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByFloatLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue {
    /// `value` laid over `defaults`: objects merge key by key (recursively), anything else in
    /// `value` replaces the default; `nil` keeps the default.
    public static func merge(_ defaults: JSONValue, under value: JSONValue?) -> JSONValue {
        guard let value else { return defaults }
        guard case .object(var base) = defaults, case .object(let top) = value else { return value }
        for (key, v) in top { base[key] = base[key].map { merge($0, under: v) } ?? v }
        return .object(base)
    }
}
