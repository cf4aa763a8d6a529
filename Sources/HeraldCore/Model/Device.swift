import FoundationEssentials
import Glibc

/// Hex device tokens (APNs tokens, hex installation ids): parsing and normalisation.
public enum DeviceToken {
    /// Shortest and longest token Herald accepts, in bytes. APNs tokens are 32 bytes today, but
    /// Apple documents them as variable length, so Herald does not hard-code the size.
    public static let byteLengthRange = 8...256

    /// Why a token string was refused.
    public enum Problem: Error, Equatable, CustomStringConvertible, Sendable {
        case empty
        case notHex(character: Character)
        case oddLength(Int)
        case badLength(bytes: Int)

        public var description: String {
            switch self {
            case .empty: return "device token is empty"
            case .notHex(let c): return "device token has a character that is not hexadecimal: \"\(c)\""
            case .oddLength(let n): return "device token has an odd number of hex digits (\(n))"
            case .badLength(let n):
                return "device token is \(n) bytes; expected \(DeviceToken.byteLengthRange.lowerBound)–\(DeviceToken.byteLengthRange.upperBound)"
            }
        }
    }

    /// Normalises a token as apps send it: lower-case hex with spaces and the `<` `>` of
    /// `NSData.description` removed (`"<1F2E 3D4C …>"` → `"1f2e3d4c…"`).
    /// - Throws: ``Problem`` naming what is wrong.
    public static func normalize(_ raw: String) throws(Problem) -> String {
        // Fast path: already lower-case hex of a valid length (what stores and files hold).
        let utf8 = raw.utf8
        if utf8.count % 2 == 0, byteLengthRange.contains(utf8.count / 2),
           utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) {
            return raw
        }
        var out = ""
        out.reserveCapacity(raw.utf8.count)
        for ch in raw {
            switch ch {
            case " ", "<", ">", "\t", "\n", "\r": continue
            case "0"..."9", "a"..."f": out.append(ch)
            case "A"..."F": out.append(Character(ch.lowercased()))
            default: throw .notHex(character: ch)
            }
        }
        if out.isEmpty { throw .empty }
        if out.count % 2 != 0 { throw .oddLength(out.count) }
        let bytes = out.count / 2
        if !byteLengthRange.contains(bytes) { throw .badLength(bytes: bytes) }
        return out
    }

    /// The bytes of a normalised hex token.
    public static func bytes(ofHex hex: String) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8? = nil
        for c in hex.utf8 {
            let v: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): v = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): v = c - UInt8(ascii: "A") + 10
            default: continue
            }
            if let h = high { result.append(h << 4 | v); high = nil } else { high = v }
        }
        return result
    }

    /// Lower-case hex of bytes.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A registered device: one app installation on one phone, owned by one user.
public struct Device: Sendable, Equatable, Codable {
    /// The app id (a key of `apps` in the config).
    public var app: String
    /// The device's address as its route's plugin normalised it (lower-case hex for APNs); unique within an app.
    public var token: String
    /// The user who owns the device now.
    public var user: String
    /// Name of the transport (a key of `transports`) that carries this device's notifications.
    public var transport: String
    /// What the transport's plugin keeps beside the address (APNs: `environment`).
    public var attributes: DeviceAttributes
    public var createdAt: Date
    /// Time of the last registration; the timestamp rule compares against it.
    public var updatedAt: Date
    /// Set when the platform reported the address dead; `nil` for live devices.
    public var invalidatedAt: Date?
    public var invalidationReason: String?

    public init(app: String, token: String, user: String, transport: String, attributes: DeviceAttributes = DeviceAttributes(),
                createdAt: Date, updatedAt: Date, invalidatedAt: Date? = nil, invalidationReason: String? = nil) {
        self.app = app
        self.token = token
        self.user = user
        self.transport = transport
        self.attributes = attributes
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.invalidatedAt = invalidatedAt
        self.invalidationReason = invalidationReason
    }

    /// Whether the device can receive notifications (not invalidated).
    public var isActive: Bool { invalidatedAt == nil }

    /// Writes the device as a JSON object (the CLI's `--json` and the API use this shape).
    public func writeJSON(into o: inout ObjectWriter) {
        o.string("app", app)
        o.string("user", user)
        o.string("token", token)
        o.string("transport", transport)
        attributes.writeMembers(into: &o)
        o.string("created_at", createdAt.iso8601)
        o.string("updated_at", updatedAt.iso8601)
        if let invalidatedAt { o.string("invalidated_at", invalidatedAt.iso8601) } else { o.null("invalidated_at") }
        if let invalidationReason { o.string("invalidation_reason", invalidationReason) } else { o.null("invalidation_reason") }
    }
}

/// What a client asks the store to register.
public struct DeviceRegistration: Sendable, Equatable {
    public var app: String
    /// The address as the route's plugin normalised it (see ``TransportConfiguration/address(_:attributes:)``).
    public var token: String
    public var user: String
    public var transport: String
    public var attributes: DeviceAttributes
    /// The most devices the user may have registered in the app (the app's
    /// `maxRegisteredDevicesPerUser`): past it, the store removes the user's least recently
    /// registered devices in the same transaction (``RegistrationResult/removed``). `nil`: no bound.
    public var maxPerUser: Int?

    public init(app: String, token: String, user: String, transport: String, attributes: DeviceAttributes = DeviceAttributes(),
                maxPerUser: Int? = nil) {
        self.app = app
        self.token = token
        self.user = user
        self.transport = transport
        self.attributes = attributes
        self.maxPerUser = maxPerUser
    }
}
