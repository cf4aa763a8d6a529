/// A small, allocation-frugal JSON writer into a byte buffer.
///
/// Used on hot paths (APNs payloads, JSONL records, API responses) where `JSONEncoder` costs too
/// much. Callers are responsible for the structure (commas are handled by ``ObjectWriter``).
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// The written text.
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    public mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    public mutating func raw(_ byte: UInt8) { bytes.append(byte) }

    /// Appends already-serialised JSON.
    public mutating func rawJSON(_ json: [UInt8]) { bytes.append(contentsOf: json) }

    /// Writes a quoted, escaped JSON string.
    public mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var start = 0
            for i in 0..<utf8.count {
                let c = utf8[i]
                if c >= 0x20 && c != UInt8(ascii: "\"") && c != UInt8(ascii: "\\") { continue }
                if start < i { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<i])) }
                start = i + 1
                switch c {
                case UInt8(ascii: "\""): raw("\\\"")
                case UInt8(ascii: "\\"): raw("\\\\")
                case 0x0A: raw("\\n")
                case 0x0D: raw("\\r")
                case 0x09: raw("\\t")
                case 0x08: raw("\\b")
                case 0x0C: raw("\\f")
                default:
                    raw("\\u00")
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    bytes.append(hex[Int(c >> 4)])
                    bytes.append(hex[Int(c & 0xF)])
                }
            }
            if start < utf8.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<utf8.count])) }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func number(_ value: Int) {
        bytes.append(contentsOf: String(value).utf8)
    }

    public mutating func number(_ value: Int64) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Writes a double; integral values are written without a fraction (`3`, not `3.0`).
    public mutating func number(_ value: Double) {
        if value.isFinite, value.rounded() == value, abs(value) < 9.0e15 {
            bytes.append(contentsOf: String(Int64(value)).utf8)
        } else if value.isFinite {
            bytes.append(contentsOf: "\(value)".utf8)
        } else {
            raw("null")
        }
    }

    public mutating func bool(_ value: Bool) { value ? raw("true") : raw("false") }

    /// Writes any ``JSONValue`` (object keys sorted).
    public mutating func write(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case .bool(let b): bool(b)
        case .number(let n): number(n)
        case .string(let s): string(s)
        case .array(let items):
            raw(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { raw(UInt8(ascii: ",")) }
                write(item)
            }
            raw(UInt8(ascii: "]"))
        case .object(let members):
            raw(UInt8(ascii: "{"))
            for (i, key) in members.keys.sorted().enumerated() {
                if i > 0 { raw(UInt8(ascii: ",")) }
                string(key)
                raw(UInt8(ascii: ":"))
                write(members[key]!)
            }
            raw(UInt8(ascii: "}"))
        }
    }

    /// Writes an object; the closure adds members through the ``ObjectWriter``.
    public mutating func object(_ body: (inout ObjectWriter) -> Void) {
        raw(UInt8(ascii: "{"))
        var object = ObjectWriter(writer: self)
        self = JSONWriter(capacity: 0)
        body(&object)
        self = object.writer
        raw(UInt8(ascii: "}"))
    }
}

/// Adds members to a JSON object being written; handles the commas.
public struct ObjectWriter: Sendable {
    fileprivate var writer: JSONWriter
    private var count = 0

    fileprivate init(writer: JSONWriter) { self.writer = writer }

    private mutating func key(_ name: String) {
        if count > 0 { writer.raw(UInt8(ascii: ",")) }
        count += 1
        writer.string(name)
        writer.raw(UInt8(ascii: ":"))
    }

    public mutating func string(_ name: String, _ value: String?) {
        guard let value else { return }
        key(name); writer.string(value)
    }
    public mutating func int(_ name: String, _ value: Int?) {
        guard let value else { return }
        key(name); writer.number(value)
    }
    public mutating func int64(_ name: String, _ value: Int64?) {
        guard let value else { return }
        key(name); writer.number(value)
    }
    public mutating func double(_ name: String, _ value: Double?) {
        guard let value else { return }
        key(name); writer.number(value)
    }
    public mutating func bool(_ name: String, _ value: Bool?) {
        guard let value else { return }
        key(name); writer.bool(value)
    }
    public mutating func null(_ name: String) {
        key(name); writer.raw("null")
    }
    public mutating func value(_ name: String, _ value: JSONValue?) {
        guard let value else { return }
        key(name); writer.write(value)
    }
    public mutating func stringArray(_ name: String, _ values: [String]?) {
        guard let values else { return }
        key(name)
        writer.raw(UInt8(ascii: "["))
        for (i, v) in values.enumerated() {
            if i > 0 { writer.raw(UInt8(ascii: ",")) }
            writer.string(v)
        }
        writer.raw(UInt8(ascii: "]"))
    }
    public mutating func object(_ name: String, _ body: (inout ObjectWriter) -> Void) {
        key(name)
        writer.object(body)
    }
    public mutating func array(_ name: String, _ body: (inout JSONWriter) -> Void) {
        key(name)
        writer.raw(UInt8(ascii: "["))
        body(&writer)
        writer.raw(UInt8(ascii: "]"))
    }
    /// Adds a member whose value is already-serialised JSON.
    public mutating func rawJSON(_ name: String, _ json: [UInt8]) {
        key(name); writer.rawJSON(json)
    }
}
