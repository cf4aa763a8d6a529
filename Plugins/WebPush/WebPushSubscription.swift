import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// A browser's push subscription (`PushSubscription.toJSON()`), the address of a `webpush` device:
/// `{"endpoint": "https://…", "keys": {"p256dh": "<base64url>", "auth": "<base64url>"}}`.
///
/// The store keeps it whole as its canonical JSON (``canonicalJSON``: keys sorted, the keys
/// re-encoded as unpadded base64url, `expirationTime` left out), so one subscription is one
/// device however the page spelled it.
public struct WebPushSubscription: Sendable, Equatable {
    /// The push service URL messages are POSTed to.
    public var endpoint: String
    /// The user agent's P-256 public key (`keys.p256dh`), parsed and checked once: what each
    /// message's ECDH uses, without importing the bytes again.
    public let userAgentPublicKey: P256PublicKey
    /// The user agent's P-256 public key, 65 bytes uncompressed (`keys.p256dh`).
    public var p256dh: [UInt8] { userAgentPublicKey.uncompressedRepresentation }
    /// The 16-byte authentication secret (`keys.auth`).
    public var auth: [UInt8]
    /// The endpoint's parts.
    public var origin: PushServiceOrigin
    /// The request path (and query) on the origin.
    public var path: String

    /// The stored form: `{"endpoint":"…","keys":{"auth":"…","p256dh":"…"}}`.
    public var canonicalJSON: String {
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.string("endpoint", endpoint)
            o.object("keys") { k in
                k.string("auth", Base64URL.encode(auth))
                k.string("p256dh", Base64URL.encode(p256dh))
            }
        }
        return w.string
    }

    /// Reads and checks a subscription as a page sends it.
    /// - Parameter allowList: the push services the route may send to.
    /// - Throws: ``AddressProblem`` naming the field (`subscription.endpoint`,
    ///   `subscription.keys.p256dh`, `subscription.keys.auth`) and what is expected.
    public init(json: JSONValue, allowList: EndpointAllowList, field: String = "subscription") throws(AddressProblem) {
        guard case .object(let members) = json else {
            throw AddressProblem(field: field, "expected the browser's PushSubscription as JSON: {\"endpoint\": \"https://…\", \"keys\": {\"p256dh\": \"…\", \"auth\": \"…\"}}, found \(json.typeDescription)")
        }
        for key in members.keys.sorted() where !["endpoint", "keys", "expirationTime"].contains(key) {
            throw AddressProblem(field: "\(field).\(key)", "unknown key; a subscription has endpoint, keys and expirationTime")
        }
        guard case .string(let endpoint)? = members["endpoint"] else {
            throw AddressProblem(field: "\(field).endpoint", members["endpoint"] == nil ? "is required: the push service URL" : "must be a string (the push service URL)")
        }
        guard case .object(let keys)? = members["keys"] else {
            throw AddressProblem(field: "\(field).keys", members["keys"] == nil ? "is required: {\"p256dh\": \"…\", \"auth\": \"…\"}" : "must be an object with p256dh and auth")
        }
        for key in keys.keys.sorted() where !["p256dh", "auth"].contains(key) {
            throw AddressProblem(field: "\(field).keys.\(key)", "unknown key; keys has p256dh and auth")
        }
        let parsed = try Self.parseEndpoint(endpoint, field: "\(field).endpoint")
        guard allowList.allows(host: parsed.origin.host, port: parsed.origin.port) else {
            throw AddressProblem(field: "\(field).endpoint", "push service \(parsed.origin) is not in this route's allowedEndpoints (\(allowList))", byPolicy: true)
        }
        self.endpoint = endpoint
        self.origin = parsed.origin
        self.path = parsed.path
        let p256dh = try Self.key(keys["p256dh"], field: "\(field).keys.p256dh")
        guard let key = try? P256PublicKey(uncompressed: p256dh, source: "\(field).keys.p256dh") else {
            let why = p256dh.count != 65 || p256dh.first != 0x04 ? "is \(p256dh.count) bytes; expected a 65-byte uncompressed P-256 point (0x04, X, Y)" : "is not a point on the P-256 curve"
            throw AddressProblem(field: "\(field).keys.p256dh", why)
        }
        self.userAgentPublicKey = key
        self.auth = try Self.key(keys["auth"], field: "\(field).keys.auth")
        guard auth.count == WebPushEncryption.authSecretLength else {
            throw AddressProblem(field: "\(field).keys.auth", "is \(auth.count) bytes; the auth secret is 16 bytes")
        }
    }

    /// Reads a stored (or raw) subscription: its canonical JSON as a string.
    public init(stored text: String, allowList: EndpointAllowList, field: String = "token") throws(AddressProblem) {
        let json: JSONValue
        do { json = try JSONValue.parse(text) } catch {
            throw AddressProblem(field: field, "a webpush device is a browser's PushSubscription: give it as \"subscription\" (an object) or its JSON text")
        }
        try self.init(json: json, allowList: allowList, field: field)
    }

    private static func key(_ value: JSONValue?, field: String) throws(AddressProblem) -> [UInt8] {
        guard case .string(let text)? = value else {
            throw AddressProblem(field: field, value == nil ? "is required (base64url)" : "must be a base64url string")
        }
        // Pages send base64url; some libraries send standard base64 with padding.
        let normalized = String(text.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
        guard let bytes = Base64URL.decode(normalized) else { throw AddressProblem(field: field, "is not base64url text") }
        return bytes
    }

    /// Splits an `https://host[:port]/path` endpoint.
    static func parseEndpoint(_ endpoint: String, field: String) throws(AddressProblem) -> (origin: PushServiceOrigin, path: String) {
        guard endpoint.utf8.count <= 2048 else { throw AddressProblem(field: field, "is longer than 2048 bytes") }
        guard endpoint.lowercased().hasPrefix("https://") else {
            throw AddressProblem(field: field, "must be an https:// URL (push services are reached over TLS), found \"\(endpoint.prefix(40))\"")
        }
        guard endpoint.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw AddressProblem(field: field, "must be a URL of printable ASCII without spaces")
        }
        let rest = endpoint.dropFirst("https://".count)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var path = String(rest.dropFirst(authority.count))
        if let hash = path.firstIndex(of: "#") { path = String(path[..<hash]) }
        if path.isEmpty { path = "/" } else if path.hasPrefix("?") { path = "/" + path }
        guard !authority.contains("@") else { throw AddressProblem(field: field, "must not carry user information before the host") }
        var host: Substring, port = 443
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw AddressProblem(field: field, "has an IPv6 address without its closing ]") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (1...65535).contains(p) else { throw AddressProblem(field: field, "has a bad port") }
                port = p
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            guard let p = Int(authority[authority.index(after: colon)...]), (1...65535).contains(p) else {
                throw AddressProblem(field: field, "has a port that is not a number from 1 to 65535")
            }
            port = p
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw AddressProblem(field: field, "has no host") }
        return (PushServiceOrigin(host: host.lowercased(), port: port), path)
    }
}

/// A push service's origin: where requests go, and the VAPID `aud`.
public struct PushServiceOrigin: Sendable, Hashable, CustomStringConvertible {
    /// Lower-case; an IPv6 address without brackets.
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `https://host` or `https://host:port` (the port left out when 443), as RFC 8292's `aud`.
    public var description: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? "https://\(h)" : "https://\(h):\(port)"
    }
}
