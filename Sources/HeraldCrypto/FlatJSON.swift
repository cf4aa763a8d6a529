/// A small strict reader for the flat JSON objects in JWT headers and claims.
///
/// Top-level members keep strings and numbers (as their literal text); nested objects, arrays,
/// booleans and null are validated and reported as `.other`.
struct FlatJSON {
    enum Value: Equatable {
        case string(String)
        case number(String)
        case other
    }

    private let bytes: [UInt8]
    private var i = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    /// The object's members, or nil unless the whole input is one valid JSON object.
    mutating func parseObject() -> [String: Value]? {
        skipSpace()
        guard let members = object(depth: 0) else { return nil }
        skipSpace()
        return i == bytes.count ? members : nil
    }

    private mutating func skipSpace() {
        while i < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i]) { i += 1 }
    }

    private mutating func consume(_ c: UInt8) -> Bool {
        guard i < bytes.count, bytes[i] == c else { return false }
        i += 1
        return true
    }

    private mutating func object(depth: Int) -> [String: Value]? {
        guard depth < 32, consume(UInt8(ascii: "{")) else { return nil }
        var members: [String: Value] = [:]
        skipSpace()
        if consume(UInt8(ascii: "}")) { return members }
        while true {
            skipSpace()
            guard let key = string() else { return nil }
            skipSpace()
            guard consume(UInt8(ascii: ":")) else { return nil }
            skipSpace()
            guard let v = value(depth: depth) else { return nil }
            members[key] = v
            skipSpace()
            if consume(UInt8(ascii: ",")) { continue }
            return consume(UInt8(ascii: "}")) ? members : nil
        }
    }

    private mutating func value(depth: Int) -> Value? {
        guard i < bytes.count else { return nil }
        switch bytes[i] {
        case UInt8(ascii: "\""):
            return string().map { .string($0) }
        case UInt8(ascii: "{"):
            return object(depth: depth + 1) == nil ? nil : .other
        case UInt8(ascii: "["):
            i += 1
            skipSpace()
            if consume(UInt8(ascii: "]")) { return .other }
            while true {
                skipSpace()
                guard value(depth: depth + 1) != nil else { return nil }
                skipSpace()
                if consume(UInt8(ascii: ",")) { continue }
                return consume(UInt8(ascii: "]")) ? .other : nil
            }
        case UInt8(ascii: "t"): return literal("true") ? .other : nil
        case UInt8(ascii: "f"): return literal("false") ? .other : nil
        case UInt8(ascii: "n"): return literal("null") ? .other : nil
        default: return number()
        }
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - i >= count else { return false }
        for k in 0..<count where bytes[i + k] != word.utf8Start[k] { return false }
        i += count
        return true
    }

    /// A JSON number per RFC 8259's grammar, returned as its text.
    private mutating func number() -> Value? {
        let start = i
        func digits() -> Int {
            let s = i
            while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9") { i += 1 }
            return i - s
        }
        _ = consume(UInt8(ascii: "-"))
        let intStart = i
        let intDigits = digits()
        guard intDigits > 0, !(intDigits > 1 && bytes[intStart] == UInt8(ascii: "0")) else { return nil }
        if consume(UInt8(ascii: ".")) { guard digits() > 0 else { return nil } }
        if consume(UInt8(ascii: "e")) || consume(UInt8(ascii: "E")) {
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard digits() > 0 else { return nil }
        }
        return .number(String(decoding: bytes[start..<i], as: UTF8.self))
    }

    private mutating func string() -> String? {
        guard consume(UInt8(ascii: "\"")) else { return nil }
        var out: [UInt8] = []
        while i < bytes.count {
            let c = bytes[i]
            i += 1
            switch c {
            case UInt8(ascii: "\""):
                // Reject invalid UTF-8 rather than silently repairing it.
                return String(validating: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard i < bytes.count else { return nil }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    guard var scalar = hex4() else { return nil }
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard consume(UInt8(ascii: "\\")), consume(UInt8(ascii: "u")), let low = hex4(),
                              (0xDC00..<0xE000).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let u = Unicode.Scalar(scalar) else { return nil }
                    out.append(contentsOf: Array(String(Character(u)).utf8))
                default: return nil
                }
            case 0..<0x20: return nil
            default: out.append(c)
            }
        }
        return nil
    }

    private mutating func hex4() -> UInt32? {
        guard bytes.count - i >= 4 else { return nil }
        var v: UInt32 = 0
        for _ in 0..<4 {
            guard let d = Character(Unicode.Scalar(bytes[i])).hexDigitValue else { return nil }
            v = v << 4 | UInt32(d)
            i += 1
        }
        return v
    }
}
