/// Herald's one JSON parser (RFC 8259), behind ``JSONValue/parse(_:)-(Data)`` for configuration
/// files, API bodies, JWTs and records: one value, no trailing data, no duplicate keys, nesting
/// at most ``maxDepth``, valid UTF-8. Errors say where (byte offset) and what.
///
/// Faster than `JSONDecoder` for small documents, which matters at tens of thousands of API
/// requests per second; the daemon's fast body reader drives ``Parser`` directly.
package enum StrictJSON {
    package static let maxDepth = 64

    package struct ParseError: Error, CustomStringConvertible {
        package var message: String
        package var offset: Int
        package var description: String { "invalid JSON at byte \(offset): \(message)" }
    }

    package static func parse(_ bytes: [UInt8]) throws(ParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer throws(ParseError) -> JSONValue in
            var parser = Parser(bytes: buffer)
            parser.skipSpace()
            let value = try parser.value(depth: 0)
            parser.skipSpace()
            if parser.index != buffer.count { throw parser.error("unexpected data after the JSON value") }
            return value
        }
    }

    /// The parser; ``NotificationBody`` drives it directly for its fast path.
    package struct Parser {
        package let bytes: UnsafeBufferPointer<UInt8>
        package var index = 0

        package init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        package func error(_ message: String) -> ParseError { ParseError(message: message, offset: index) }

        package mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        package mutating func value(depth: Int) throws(ParseError) -> JSONValue {
            guard index < bytes.count else { throw error("unexpected end of input") }
            switch bytes[index] {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["): return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default:
                let b = bytes[index]
                throw error(b >= 0x21 && b < 0x7F ? "unexpected character '\(Character(Unicode.Scalar(b)))'"
                                                  : "unexpected byte 0x\(String(b, radix: 16, uppercase: true))")
            }
        }

        package mutating func literal(_ word: StaticString) throws(ParseError) {
            let n = word.utf8CodeUnitCount
            guard index + n <= bytes.count else { throw error("unexpected end of input") }
            for i in 0..<n where bytes[index + i] != word.utf8Start[i] { throw error("invalid literal") }
            index += n
        }

        package mutating func object(depth: Int) throws(ParseError) -> JSONValue {
            if depth > StrictJSON.maxDepth { throw error("nested deeper than \(StrictJSON.maxDepth) levels") }
            index += 1
            var members: [String: JSONValue] = [:]
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            while true {
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a string key") }
                let keyOffset = index
                let key = try string()
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':' after a key") }
                index += 1
                skipSpace()
                let v = try value(depth: depth)
                if members.updateValue(v, forKey: key) != nil {
                    throw ParseError(message: "duplicate key \"\(key)\"", offset: keyOffset)
                }
                skipSpace()
                guard index < bytes.count else { throw error("unexpected end of input in an object") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                throw error("expected ',' or '}' in an object")
            }
        }

        package mutating func array(depth: Int) throws(ParseError) -> JSONValue {
            if depth > StrictJSON.maxDepth { throw error("nested deeper than \(StrictJSON.maxDepth) levels") }
            index += 1
            var items: [JSONValue] = []
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
            while true {
                skipSpace()
                items.append(try value(depth: depth))
                skipSpace()
                guard index < bytes.count else { throw error("unexpected end of input in an array") }
                if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
                throw error("expected ',' or ']' in an array")
            }
        }

        package mutating func string() throws(ParseError) -> String {
            index += 1
            let start = index
            // Fast path: no escapes.
            while index < bytes.count {
                let c = bytes[index]
                if c == UInt8(ascii: "\"") {
                    let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                    index += 1
                    guard let s = String(validating: slice, as: UTF8.self) else { throw ParseError(message: "invalid UTF-8 in a string", offset: start) }
                    return s
                }
                if c == UInt8(ascii: "\\") { break }
                if c < 0x20 { throw error("control character in a string (escape it)") }
                index += 1
            }
            var out = Array(bytes[start..<index])
            while index < bytes.count {
                let c = bytes[index]
                if c == UInt8(ascii: "\"") {
                    index += 1
                    guard let s = String(validating: out, as: UTF8.self) else { throw ParseError(message: "invalid UTF-8 in a string", offset: start) }
                    return s
                }
                if c < 0x20 { throw error("control character in a string (escape it)") }
                if c != UInt8(ascii: "\\") { out.append(c); index += 1; continue }
                index += 1
                guard index < bytes.count else { break }
                let e = bytes[index]
                index += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("lone high surrogate in \\u escape")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid low surrogate in \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("lone low surrogate in \\u escape")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default:
                    throw error("invalid escape \\\(Character(Unicode.Scalar(e)))")
                }
            }
            throw error("unterminated string")
        }

        package mutating func hex4() throws(ParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("short \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[index]
                let d: UInt32
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
                default: throw error("invalid hex digit in \\u escape")
                }
                v = v << 4 | d
                index += 1
            }
            return v
        }

        package mutating func number() throws(ParseError) -> Double {
            let start = index
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count else { throw error("unexpected end of input in a number") }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            } else {
                throw error("invalid number")
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                let digits = index
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
                if index == digits { throw error("expected digits after '.'") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                let digits = index
                while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
                if index == digits { throw error("expected digits in the exponent") }
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            guard let d = Double(text), d.isFinite else { throw ParseError(message: "number out of range", offset: start) }
            return d
        }
    }
}
