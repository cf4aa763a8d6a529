internal import COpenSSL

/// Base64url without padding (RFC 4648 §5), as JWTs use it.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Encodes `bytes` without `=` padding.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        withBytes(bytes) { input in
            let count = input.count
            let outputCount = (count / 3) * 4 + [0, 2, 3][count % 3]
            return String(unsafeUninitializedCapacity: outputCount) { output in
                var o = 0, i = 0
                while i + 3 <= count {
                    let v = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                    output[o] = alphabet[Int(v >> 18 & 63)]
                    output[o + 1] = alphabet[Int(v >> 12 & 63)]
                    output[o + 2] = alphabet[Int(v >> 6 & 63)]
                    output[o + 3] = alphabet[Int(v & 63)]
                    i += 3; o += 4
                }
                if count - i == 1 {
                    let v = UInt32(input[i]) << 16
                    output[o] = alphabet[Int(v >> 18 & 63)]
                    output[o + 1] = alphabet[Int(v >> 12 & 63)]
                    o += 2
                } else if count - i == 2 {
                    let v = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8
                    output[o] = alphabet[Int(v >> 18 & 63)]
                    output[o + 1] = alphabet[Int(v >> 12 & 63)]
                    output[o + 2] = alphabet[Int(v >> 6 & 63)]
                    o += 3
                }
                return o
            }
        }
    }

    /// Decodes base64url text; trailing `=` padding is tolerated.
    /// - Returns: nil for characters outside the base64url alphabet or an impossible length.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var utf8 = Substring(text).utf8[...]
        while utf8.last == UInt8(ascii: "=") { utf8 = utf8.dropLast() }
        if utf8.count % 4 == 1 { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(utf8.count * 3 / 4)
        var accumulator: UInt32 = 0, bits = 0
        for c in utf8 {
            let v: UInt32
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = UInt32(c - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = UInt32(c - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = UInt32(c - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "-"): v = 62
            case UInt8(ascii: "_"): v = 63
            default: return nil
            }
            accumulator = accumulator << 6 | v
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return output
    }
}

/// SHA-256 digests.
public enum SHA256 {
    /// The 32-byte SHA-256 digest of `bytes`.
    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        ensureOpenSSL()
        return withBytes(bytes) { input in
            [UInt8](unsafeUninitializedCapacity: 32) { output, count in
                var length: UInt32 = 0
                let ok = EVP_Digest(input.baseAddress ?? UnsafeRawPointer(output.baseAddress!), input.count,
                                    output.baseAddress, &length, sha256Digest, nil)
                precondition(ok == 1 && length == 32, "SHA-256 is unavailable in this OpenSSL")
                count = 32
            }
        }
    }
}

/// The little DER needed here: ECDSA signature conversion and Apple's topics extension.
enum DER {
    /// Splits the first TLV off `bytes`: (tag, contents, rest), or nil when malformed.
    static func element(_ bytes: ArraySlice<UInt8>) -> (tag: UInt8, contents: ArraySlice<UInt8>, rest: ArraySlice<UInt8>)? {
        var i = bytes.startIndex
        guard i < bytes.endIndex else { return nil }
        let tag = bytes[i]; i += 1
        guard i < bytes.endIndex else { return nil }
        var length = Int(bytes[i]); i += 1
        if length & 0x80 != 0 {
            let octets = length & 0x7F
            guard octets >= 1, octets <= 4, bytes.endIndex - i >= octets else { return nil }
            length = 0
            for _ in 0..<octets { length = length << 8 | Int(bytes[i]); i += 1 }
        }
        guard bytes.endIndex - i >= length else { return nil }
        return (tag, bytes[i..<i + length], bytes[(i + length)...])
    }

    /// DER `SEQUENCE { INTEGER r, INTEGER s }` → 64 bytes r||s (each left-padded to 32).
    static func rawSignature(fromDER der: ArraySlice<UInt8>) -> [UInt8]? {
        guard let sequence = element(der), sequence.tag == 0x30, sequence.rest.isEmpty,
              let r = element(sequence.contents), r.tag == 0x02,
              let s = element(r.rest), s.tag == 0x02, s.rest.isEmpty else { return nil }
        var raw = [UInt8](repeating: 0, count: 64)
        for (integer, offset) in [(r.contents, 0), (s.contents, 32)] {
            let digits = integer.drop { $0 == 0 }
            guard digits.count <= 32 else { return nil }
            raw.replaceSubrange(offset + 32 - digits.count..<offset + 32, with: digits)
        }
        return raw
    }

    /// 64 bytes r||s → DER `SEQUENCE { INTEGER r, INTEGER s }`; nil unless exactly 64 bytes.
    static func derSignature(fromRaw raw: some Collection<UInt8>) -> [UInt8]? {
        let bytes = Array(raw)
        guard bytes.count == 64 else { return nil }
        var body: [UInt8] = []
        body.reserveCapacity(70)
        for half in [bytes[0..<32], bytes[32..<64]] {
            var digits = half.drop { $0 == 0 }
            if digits.isEmpty { digits = [0][...] }
            body.append(0x02)
            if digits.first! & 0x80 != 0 {
                body.append(UInt8(digits.count + 1)); body.append(0)
            } else {
                body.append(UInt8(digits.count))
            }
            body.append(contentsOf: digits)
        }
        return [0x30, UInt8(body.count)] + body
    }
}
