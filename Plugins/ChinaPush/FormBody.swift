import FoundationEssentials
import HeraldCore

/// An `application/x-www-form-urlencoded` body, as Xiaomi, OPPO and Huawei's token endpoint take it.
///
/// Names and values are UTF-8, percent-encoded except the unreserved characters of RFC 3986
/// (`A-Z a-z 0-9 - . _ ~`); fields keep the order they were added in.
public struct FormBody: Sendable, Equatable {
    /// The fields, in order.
    public private(set) var fields: [(name: String, value: String)] = []

    public init() {}

    /// A body with `fields` in order.
    public init(_ fields: [(String, String)]) {
        for (n, v) in fields { append(n, v) }
    }

    /// Adds one field.
    public mutating func append(_ name: String, _ value: String) { fields.append((name, value)) }

    /// The encoded body.
    public var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 2 })
        for (i, field) in fields.enumerated() {
            if i > 0 { out.append(UInt8(ascii: "&")) }
            Self.encode(field.name, into: &out)
            out.append(UInt8(ascii: "="))
            Self.encode(field.value, into: &out)
        }
        return out
    }

    /// `text` percent-encoded (every byte but the unreserved ones).
    public static func encode(_ text: String) -> String {
        var out: [UInt8] = []
        encode(text, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    static func encode(_ text: String, into out: inout [UInt8]) {
        let hex = Array("0123456789ABCDEF".utf8)
        for b in text.utf8 {
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x2E || b == 0x5F || b == 0x7E {
                out.append(b)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0x0F)])
            }
        }
    }

    public static func == (a: FormBody, b: FormBody) -> Bool {
        a.fields.count == b.fields.count && zip(a.fields, b.fields).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }
}
