import FoundationEssentials
import Glibc

/// The platform a route's devices run on, as clients name it when they register (`"platform"`).
///
/// A plugin says which platform its devices are (APNs: ``ios``); routes that carry any device
/// (the `local` streams, the `log` dry run) have none. The set is open: a plugin for a new
/// platform declares its own value.
public struct Platform: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    /// Apple devices (APNs).
    public static let ios = Platform("ios")
    /// Android devices.
    public static let android = Platform("android")
    /// Browsers.
    public static let web = Platform("web")

    public var description: String { rawValue }
}

/// Facts a plugin keeps about a device beside its address (APNs: `environment`), stored with
/// the device as a JSON object of strings. The core stores and passes them; only the plugin
/// that defined a key reads it.
public struct DeviceAttributes: Sendable, Hashable, Codable, CustomStringConvertible {
    public private(set) var values: [String: String]

    public init(_ values: [String: String] = [:]) { self.values = values }

    public subscript(key: String) -> String? {
        get { values[key] }
        set { values[key] = newValue }
    }

    public var isEmpty: Bool { values.isEmpty }

    /// The attribute that links a browser's push subscription (the device) to the installation
    /// id its page's live stream is keyed by (`POST /v1/stream/subscription` sets it from the
    /// client token's `device`): under `local-first` the fan-out asks presence about that id,
    /// and the subscription's local deliveries go to its stream (``Delivery/streamDevice``).
    public static let streamDevice = "stream_device"

    /// The attribute of a device that exists for one purpose of its own (a Live Activity's
    /// push-to-start or update token: `live_activity_start`, `live_activity_update`): the API
    /// reaches it only for that purpose, and a notification to its user never plans it.
    public static let purpose = "purpose"

    /// Compact JSON with sorted keys (the stored form); `nil` when there are none.
    public var json: String? {
        guard !values.isEmpty else { return nil }
        var w = JSONWriter(capacity: 64)
        w.object { o in for key in values.keys.sorted() { o.string(key, values[key]!) } }
        return w.string
    }

    /// Reads the stored form; unreadable or non-string members are left out.
    public init(json: String?) {
        var values: [String: String] = [:]
        if let json, !json.isEmpty, let parsed = try? JSONValue.parse(Data(json.utf8)), case .object(let members) = parsed {
            for (key, value) in members { if case .string(let s) = value { values[key] = s } }
        }
        self.values = values
    }

    /// Writes the attributes as members of `o` (the API's device JSON has them at the top level).
    public func writeMembers(into o: inout ObjectWriter) {
        for key in values.keys.sorted() { o.string(key, values[key]!) }
    }

    public var description: String { json ?? "{}" }
}

/// A device's address as a client gives it: a string (`"token"`) or a structured value
/// (`"subscription"`, a browser's `PushSubscription`).
public enum DeviceAddressInput: Sendable, Equatable {
    case token(String)
    case subscription(JSONValue)

    /// The API field the address came in.
    public var field: String {
        switch self {
        case .token: return "token"
        case .subscription: return "subscription"
        }
    }
}

/// An address as its route's plugin normalised it: the `token` the store keys the device by
/// (unique within an app) and the plugin's attributes.
public struct DeviceAddress: Sendable, Equatable {
    public var token: String
    public var attributes: DeviceAttributes

    public init(token: String, attributes: DeviceAttributes = DeviceAttributes()) {
        self.token = token
        self.attributes = attributes
    }
}

/// Why a route refused an address: the field and what the route expects.
public struct AddressProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The API field at fault (`token`, `subscription.keys.auth`, `environment`).
    public var field: String
    public var message: String
    /// The address is well formed, and the route's policy refuses it (a push service outside a
    /// `webpush` route's `allowedEndpoints`): a configuration change may make it good, so a front
    /// end must not tell its caller that the device is dead (Matrix's `rejected`).
    public var byPolicy: Bool

    public init(field: String, _ message: String, byPolicy: Bool = false) {
        self.field = field
        self.message = message
        self.byPolicy = byPolicy
    }

    public var description: String { "\(field): \(message)" }
}

/// Address rules that several plugins share.
public enum AddressRules {
    /// Longest string address any route takes, in bytes.
    public static let maxTokenBytes = 4096

    /// An opaque id: 1…`maxBytes` bytes of printable ASCII without spaces (installation ids,
    /// registration tokens). Hex is lower-cased so that `"1F2E"` and `"1f2e"` are one device.
    public static func opaque(_ input: DeviceAddressInput, maxBytes: Int = 256) throws(AddressProblem) -> String {
        guard case .token(let raw) = input else {
            throw AddressProblem(field: input.field, "this route takes a string device id in \"token\", not a structured address")
        }
        if let hex = try? DeviceToken.normalize(raw) { return hex }
        if raw.isEmpty { throw AddressProblem(field: "token", "must not be empty") }
        if raw.utf8.count > maxBytes { throw AddressProblem(field: "token", "must be at most \(maxBytes) bytes, found \(raw.utf8.count)") }
        for b in raw.utf8 where b <= 0x20 || b >= 0x7F {
            throw AddressProblem(field: "token", "must be printable ASCII without spaces (found byte 0x\(String(b, radix: 16)))")
        }
        return raw
    }
}
