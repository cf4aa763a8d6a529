/// Random lower-case v4 UUIDs, fast (a per-connection xoshiro-style generator seeded from the system).
struct HTTP2UUIDGenerator {
    private var state: (UInt64, UInt64)

    init() {
        var g = SystemRandomNumberGenerator()
        state = (g.next() | 1, g.next())
    }

    private mutating func next() -> UInt64 {
        // xorshift128+
        var s1 = state.0
        let s0 = state.1
        state.0 = s0
        s1 ^= s1 << 23
        state.1 = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26)
        return state.1 &+ s0
    }

    /// Two lower-case hex digits per byte value.
    private static let hexPairs: [UInt16] = (0..<256).map { b in
        let d = Array("0123456789abcdef".utf8)
        return UInt16(d[b >> 4]) | UInt16(d[b & 0xF]) << 8
    }

    /// Writes 36 characters (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`) at `out`.
    mutating func write(to out: UnsafeMutablePointer<UInt8>) {
        var hi = next(), lo = next()
        hi = (hi & ~0xF000) | 0x4000                                // version 4
        lo = (lo & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000    // variant 10
        Self.hexPairs.withUnsafeBufferPointer { pairs in
            let raw = UnsafeMutableRawPointer(out)
            var o = 0
            for i in 0..<16 {
                if i == 4 || i == 6 || i == 8 || i == 10 { out[o] = UInt8(ascii: "-"); o += 1 }
                let byte = i < 8 ? (hi >> UInt64(56 - 8 * i)) & 0xFF : (lo >> UInt64(56 - 8 * (i - 8))) & 0xFF
                raw.storeBytes(of: pairs[Int(byte)], toByteOffset: o, as: UInt16.self)
                o += 2
            }
        }
    }

    /// A new UUID as a string.
    mutating func string() -> String {
        String(unsafeUninitializedCapacity: 36) { buffer in
            write(to: buffer.baseAddress!)
            return 36
        }
    }
}
