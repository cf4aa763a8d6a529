import FoundationEssentials
import HeraldCore

/// The push tokens China's vendors issue (HMS tokens, Xiaomi and OPPO registration ids, vivo regIds).
public enum VendorAddress {
    /// Shortest and longest token taken.
    public static let lengths = 8...512

    /// A token: 8–512 bytes of printable ASCII without spaces or commas (Xiaomi joins tokens with
    /// commas, OPPO with semicolons), kept as given (tokens are case-sensitive).
    public static func token(_ input: DeviceAddressInput, vendor: String) throws(AddressProblem) -> String {
        guard case .token(let raw) = input else {
            throw AddressProblem(field: input.field, "a \(vendor) route takes the push token in \"token\", not a structured address")
        }
        let n = raw.utf8.count
        guard lengths.contains(n) else {
            throw AddressProblem(field: "token", "a \(vendor) push token is \(lengths.lowerBound)–\(lengths.upperBound) bytes, found \(n)")
        }
        for b in raw.utf8 where b <= 0x20 || b >= 0x7F || b == UInt8(ascii: ",") || b == UInt8(ascii: ";") {
            throw AddressProblem(field: "token", "a \(vendor) push token is printable ASCII without spaces, commas or semicolons (found \(b <= 0x20 || b >= 0x7F ? "byte 0x" + String(b, radix: 16) : "\"\(Character(Unicode.Scalar(b)))\""))")
        }
        return raw
    }
}
