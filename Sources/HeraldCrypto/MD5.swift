internal import COpenSSL

/// MD5 digests, for protocols that sign with them (vivo push's auth `sign`). Not for new designs.
public enum MD5 {
    /// The 16-byte MD5 digest of `bytes`.
    public static func hash(_ bytes: some Collection<UInt8>) -> [UInt8] {
        ensureOpenSSL()
        return withBytes(bytes) { input in
            [UInt8](unsafeUninitializedCapacity: 16) { output, count in
                var length: UInt32 = 0
                let ok = EVP_Digest(input.baseAddress ?? UnsafeRawPointer(output.baseAddress!), input.count,
                                    output.baseAddress, &length, EVP_md5(), nil)
                precondition(ok == 1 && length == 16, "MD5 is unavailable in this OpenSSL")
                count = 16
            }
        }
    }

    /// The digest as lower-case hex.
    public static func hex(_ bytes: some Collection<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: hash(bytes).flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
    }
}
