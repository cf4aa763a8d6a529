import Foundation

/// A JSON value: a notification's free-form `data`, kept exactly as the server sent it.
public enum HeraldJSON: Sendable, Hashable, Codable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number written without a fraction or exponent that fits in 64 bits.
    case int(Int64)
    /// Any other number.
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([HeraldJSON])
    /// An object.
    case object([String: HeraldJSON])

    /// Decodes any JSON value (an integral number as ``int(_:)`` when it fits in 64 bits).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int64.self) { self = .int(i) }
        else if let d = try? c.decode(Double.self) { self = .double(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([HeraldJSON].self) { self = .array(a) }
        else if let o = try? c.decode([String: HeraldJSON].self) { self = .object(o) }
        else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "not a JSON value")
        }
    }

    /// Encodes the value as it was read.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .int(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// The string, when this is one.
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }

    /// The member `key`, when this is an object that has it.
    public subscript(key: String) -> HeraldJSON? { if case .object(let o) = self { return o[key] } else { return nil } }

    /// The value as Foundation objects (`NSNull`, `Bool`, `Int64`, `Double`, `String`, arrays and
    /// `[String: Any]`), as a notification's `userInfo` holds them.
    public var foundationValue: Any {
        switch self {
        case .null: return NSNull()
        case .bool(let b): return b
        case .int(let i): return i
        case .double(let d): return d
        case .string(let s): return s
        case .array(let a): return a.map(\.foundationValue)
        case .object(let o): return o.mapValues(\.foundationValue)
        }
    }
}
