/// One notification as the gateway read it off the wire (commands 0, 1 and 2).
///
/// Fields the command does not carry are `nil`: command 0 has no identifier or expiry, and only
/// command 2 can carry a priority. Multi-byte fields are big-endian on the wire.
public struct APNsBinaryNotification: Sendable, Hashable {
    /// 0 (simple), 1 (enhanced) or 2 (frame).
    public var command: UInt8
    /// Command 1's identifier, or frame item 3; opaque to the gateway and echoed in errors.
    public var identifier: UInt32?
    /// Command 1's expiry, or frame item 4 (UNIX seconds; 0 = do not store).
    public var expiry: UInt32?
    /// Frame item 5 (10 or 5); `nil` when not sent, which APNs treats as 10.
    public var priority: UInt8?
    /// The device token bytes.
    public var token: [UInt8]
    /// The payload bytes (JSON, not NUL-terminated, when the client behaves).
    public var payload: [UInt8]

    /// A notification with the given fields.
    public init(command: UInt8, identifier: UInt32? = nil, expiry: UInt32? = nil, priority: UInt8? = nil,
                token: [UInt8], payload: [UInt8]) {
        self.command = command
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
        self.token = token
        self.payload = payload
    }

    /// The token as lower-case hex.
    public var tokenHex: String { BinaryHex.encode(token) }
    /// The payload decoded as UTF-8 (invalid sequences replaced).
    public var payloadText: String { String(decoding: payload, as: UTF8.self) }
    /// The priority APNs applies: the one sent, else 10.
    public var effectivePriority: UInt8 { priority ?? 10 }
}

/// Hex helpers for device tokens.
public enum BinaryHex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lower-case hex of `bytes`.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The bytes of a hex string of exactly `2 × count` digits (no spaces), or `nil`: the fast
    /// path for normalised device tokens.
    public static func decode(_ text: String, count: Int) -> [UInt8]? {
        var text = text
        return text.withUTF8 { utf8 -> [UInt8]? in
            guard utf8.count == 2 * count else { return nil }
            var ok = true
            let bytes = [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
                for i in 0..<count {
                    let high = nibble(utf8[2 * i]), low = nibble(utf8[2 * i + 1])
                    if high > 15 || low > 15 { ok = false }
                    out[i] = high << 4 | (low & 15)
                }
                initialized = count
            }
            return ok ? bytes : nil
        }
    }

    @inline(__always)
    private static func nibble(_ c: UInt8) -> UInt8 {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return 255
        }
    }

    /// The bytes of a hex string; spaces and `<>` (as in `NSData` descriptions) are ignored.
    /// Returns `nil` for other characters or an odd number of digits.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var out: [UInt8] = []
        var high: UInt8? = nil
        for c in text.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c - UInt8(ascii: "A") + 10
            case UInt8(ascii: " "), UInt8(ascii: "<"), UInt8(ascii: ">"): continue
            default: return nil
            }
            if let h = high {
                out.append(h << 4 | v)
                high = nil
            } else {
                high = v
            }
        }
        return high == nil ? out : nil
    }
}
