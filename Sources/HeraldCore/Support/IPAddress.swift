import Glibc

/// An IPv4 or IPv6 address, held as 16 bytes (IPv4 as its IPv4-mapped IPv6 form, `::ffff:a.b.c.d`,
/// so `127.0.0.1` and `::ffff:127.0.0.1` are one address).
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// The first 8 bytes of the address in network order (IPv4 is `::ffff:a.b.c.d`).
    public private(set) var high: UInt64
    /// The last 8 bytes of the address in network order.
    public private(set) var low: UInt64

    /// The 16 bytes in network order.
    public init(bytes: [UInt8]) {
        precondition(bytes.count == 16, "an IPv6 address has 16 bytes")
        high = bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
        low = bytes[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// An IPv4 address from its 4 bytes in network order.
    public init(ipv4 b: [UInt8]) {
        precondition(b.count == 4, "an IPv4 address has 4 bytes")
        high = 0
        low = 0xffff_0000_0000 | UInt64(b[0]) << 24 | UInt64(b[1]) << 16 | UInt64(b[2]) << 8 | UInt64(b[3])
    }

    /// Parses `192.0.2.1` or `2001:db8::1` (no brackets, no zone); `nil` otherwise.
    public init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if !text.contains(":"), inet_pton(AF_INET, text, &v4) == 1 {
            self.init(ipv4: withUnsafeBytes(of: v4.s_addr) { Array($0) })
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            self.init(bytes: withUnsafeBytes(of: v6) { Array($0) })
        } else {
            return nil
        }
    }

    /// Whether this is an IPv4 address (or IPv4-mapped IPv6).
    public var isIPv4: Bool { high == 0 && low >> 32 == 0xffff }

    /// The 16 bytes in network order.
    public var bytes: [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) } + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
    }

    /// This address with every bit past the first `bits` cleared (`bits` counts IPv4 bits for IPv4).
    public func masked(_ bits: Int) -> IPAddress {
        isIPv4 ? maskedV6(96 + max(0, min(32, bits))) : maskedV6(bits)
    }

    /// What a rate limit keys a client by: an IPv4 address whole, an IPv6 address by its /64
    /// (one subscriber's network; a host can pick any address inside it).
    public var clientPrefix: IPAddress { isIPv4 ? self : masked(64) }

    public var description: String {
        var out = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        if isIPv4 {
            var v4 = in_addr(s_addr: UInt32(truncatingIfNeeded: low).bigEndian)
            return inet_ntop(AF_INET, &v4, &out, socklen_t(out.count)) != nil ? Self.text(out) : "?"
        }
        var v6 = in6_addr()
        withUnsafeMutableBytes(of: &v6) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        return inet_ntop(AF_INET6, &v6, &out, socklen_t(out.count)) != nil ? Self.text(out) : "?"
    }

    private static func text(_ characters: [CChar]) -> String {
        String(decoding: characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A range of addresses in CIDR notation: `10.0.0.0/8`, `2001:db8::/32`, or one address (`192.0.2.7`,
/// the same as `/32` or `/128`).
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    /// The first address of the range.
    public let address: IPAddress
    /// The prefix length: 0…32 for IPv4, 0…128 for IPv6.
    public let prefixLength: Int

    /// Parses `a.b.c.d/n`, `x:y::/n` or a bare address; `nil` for anything else (a prefix longer
    /// than the family allows, host bits set are accepted and cleared).
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(String(parts[0])) else { return nil }
        let maximum = address.isIPv4 && !parts[0].contains(":") ? 32 : 128
        var length = maximum
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].allSatisfy(\.isASCII), parts[1].allSatisfy(\.isNumber),
                  parts[1].count <= 3, let n = Int(parts[1]), n <= maximum else { return nil }
            length = n
        }
        // An IPv4-mapped IPv6 range (::ffff:0:0/96 and longer) is an IPv4 range.
        let v4Bits = maximum == 32 ? length : (address.isIPv4 && length >= 96 ? length - 96 : nil)
        if let v4Bits {
            prefixLength = v4Bits
            self.address = address.masked(v4Bits)
            isIPv4 = true
        } else {
            prefixLength = length
            self.address = address.maskedV6(length)
            isIPv4 = false
        }
    }

    private let isIPv4: Bool

    /// Whether `candidate` is inside the range.
    public func contains(_ candidate: IPAddress) -> Bool {
        if isIPv4 { return candidate.isIPv4 && candidate.masked(prefixLength) == address }
        return candidate.maskedV6(prefixLength) == address
    }

    public var description: String { "\(address)/\(prefixLength)" }
}

extension IPAddress {
    /// Masked as a 128-bit address, whatever the family.
    fileprivate func maskedV6(_ bits: Int) -> IPAddress {
        var copy = self
        let total = max(0, min(128, bits))
        copy.high = total >= 64 ? high : (total == 0 ? 0 : high & ~(UInt64.max >> total))
        copy.low = total >= 128 ? low : (total <= 64 ? 0 : low & ~(UInt64.max >> (total - 64)))
        return copy
    }
}
