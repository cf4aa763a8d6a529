import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// UUIDs for hot paths: `apns-id`s (one per delivery) and notification ids.
///
/// Foundation's `UUID()` on Linux opens `/dev/urandom` for every id (three system calls);
/// this source reads `/dev/urandom` 4 KB at a time into a buffer, so an id costs a lock and a
/// 16-byte copy. The ids are as unpredictable as `UUID()`'s.
public enum UUIDSource {
    private static let pool = Mutex(RandomPool())

    /// A random (version 4) UUID.
    public static func random() -> UUID {
        var bytes = pool.withLock { $0.next16() }
        bytes.6 = (bytes.6 & 0x0F) | 0x40
        bytes.8 = (bytes.8 & 0x3F) | 0x80
        return UUID(uuid: bytes)
    }

    /// A time-ordered (version 7, RFC 9562) UUID: 48 bits of Unix milliseconds, then 74 random
    /// bits. Ids made later sort later (to the millisecond), so a database index on them grows
    /// at its end instead of touching a random page for every insert.
    public static func timeOrdered(at date: Date = Date()) -> UUID {
        var bytes = pool.withLock { $0.next16() }
        let ms = UInt64(max(0, date.timeIntervalSince1970 * 1000))
        bytes.0 = UInt8(truncatingIfNeeded: ms >> 40)
        bytes.1 = UInt8(truncatingIfNeeded: ms >> 32)
        bytes.2 = UInt8(truncatingIfNeeded: ms >> 24)
        bytes.3 = UInt8(truncatingIfNeeded: ms >> 16)
        bytes.4 = UInt8(truncatingIfNeeded: ms >> 8)
        bytes.5 = UInt8(truncatingIfNeeded: ms)
        bytes.6 = (bytes.6 & 0x0F) | 0x70
        bytes.8 = (bytes.8 & 0x3F) | 0x80
        return UUID(uuid: bytes)
    }

    /// Kernel randomness fetched in bulk from `/dev/urandom` (opened once).
    private struct RandomPool: ~Copyable {
        private var buffer = [UInt8](repeating: 0, count: 4096)
        private var offset = 4096
        private var fd: Int32 = -1

        mutating func next16() -> uuid_t {
            if offset + 16 > buffer.count { refill() }
            defer { offset += 16 }
            return buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: uuid_t.self) }
        }

        private mutating func refill() {
            if fd < 0 { fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC) }
            let device = fd
            buffer.withUnsafeMutableBytes { raw in
                var filled = 0
                while filled < raw.count, device >= 0 {
                    let n = read(device, raw.baseAddress! + filled, raw.count - filled)
                    if n > 0 { filled += n } else if n == 0 || errno != EINTR { break }
                }
                // No /dev/urandom (a chroot without /dev): the standard library's generator.
                var g = SystemRandomNumberGenerator()
                for i in filled..<raw.count { raw[i] = UInt8.random(in: 0...255, using: &g) }
            }
            offset = 0
        }
    }
}

extension UUID {
    /// The UUID in lower case (`"3f2a…"`), as Herald stores and sends `apns-id`s; unlike
    /// `uuidString.lowercased()` it formats without `printf` and allocates only the string.
    public var lowercasedString: String {
        let hex: StaticString = "0123456789abcdef"
        return withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { out in
                hex.withUTF8Buffer { digits in
                    var o = 0
                    for i in 0..<16 {
                        if i == 4 || i == 6 || i == 8 || i == 10 { out[o] = UInt8(ascii: "-"); o += 1 }
                        out[o] = digits[Int(bytes[i] >> 4)]
                        out[o + 1] = digits[Int(bytes[i] & 0x0F)]
                        o += 2
                    }
                }
                return 36
            }
        }
    }

    /// Parses the canonical text (`8-4-4-4-12` hex digits, either case) without `sscanf`, as
    /// Foundation's `UUID(uuidString:)` does on Linux; `nil` for anything else.
    public init?(lowercasedString text: String) {
        var text = text
        // Over the contiguous UTF-8 bytes: a claim parses one per delivery.
        let parsed: uuid_t? = text.withUTF8 { p -> uuid_t? in
            guard p.count == 36 else { return nil }
            var value: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let ok = withUnsafeMutableBytes(of: &value) { out -> Bool in
                var n = 0
                var high: UInt8? = nil
                for i in 0..<36 {
                    let c = p[i]
                    if i == 8 || i == 13 || i == 18 || i == 23 {
                        guard c == UInt8(ascii: "-") else { return false }
                        continue
                    }
                    let v: UInt8
                    switch c {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0")
                    case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c - UInt8(ascii: "a") + 10
                    case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c - UInt8(ascii: "A") + 10
                    default: return false
                    }
                    if let h = high { out[n] = h << 4 | v; n += 1; high = nil } else { high = v }
                }
                return n == 16 && high == nil
            }
            return ok ? value : nil
        }
        guard let parsed else { return nil }
        self = UUID(uuid: parsed)
    }
}
