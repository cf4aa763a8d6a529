import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// The browsers' side of the Web Push simulator: subscriptions whose private keys it can
/// re-derive, so a message to one can be decrypted however long ago it was made.
///
/// Subscription `n` of a seed has the push path `/push/<n>-<check>` and keys derived with
/// HKDF-SHA256 from the seed (`info` = `p256dh <n>`, `auth <n>`, `check <n>`): the same seed
/// and index always give the same subscription, so `--seed` is all a later run needs to decrypt
/// what was sent to subscriptions an earlier run wrote out. The check (8 hex digits) keeps a
/// guessed path from naming a subscription.
public struct SimulatedSubscriptions: Sendable {
    /// One subscription, with its private half.
    public struct Subscription: Sendable {
        public var index: Int
        /// `/push/<index>-<check>`.
        public var path: String
        public var privateKey: P256PrivateKey
        public var auth: [UInt8]

        /// The `PushSubscription.toJSON()` a page would send, for a push service at `origin` (`https://host:port`).
        public func json(origin: String) -> String {
            var w = JSONWriter(capacity: 256)
            w.object { o in
                o.string("endpoint", origin + path)
                o.null("expirationTime")
                o.object("keys") { k in
                    k.string("p256dh", privateKey.publicKey.base64URL)
                    k.string("auth", Base64URL.encode(auth))
                }
            }
            return w.string
        }
    }

    /// The secret all subscriptions derive from.
    public let seed: String

    public init(seed: String) { self.seed = seed }

    /// A random seed (printed by the simulator so a later run can use it).
    public static func randomSeed() -> String {
        Base64URL.encode((try? SecureRandom.bytes(16)) ?? Array(String(Int(Date().timeIntervalSince1970 * 1e6)).utf8))
    }

    /// Subscription `index`.
    public func subscription(_ index: Int) -> Subscription {
        let check = DeviceToken.hex(derive("check \(index)", 4))
        var scalar = derive("p256dh \(index)", 32)
        var key = try? P256PrivateKey(rawRepresentation: scalar)
        var round = 0
        while key == nil {  // out of range (about 2^-32): derive again
            round += 1
            scalar = derive("p256dh \(index) \(round)", 32)
            key = try? P256PrivateKey(rawRepresentation: scalar)
        }
        return Subscription(index: index, path: "/push/\(index)-\(check)", privateKey: key!, auth: derive("auth \(index)", 16))
    }

    /// The subscription a request path names, or `nil` (not a path of this seed).
    public func subscription(path: String) -> Subscription? {
        guard path.hasPrefix("/push/") else { return nil }
        let name = path.dropFirst("/push/".count)
        guard let dash = name.firstIndex(of: "-"), let index = Int(name[..<dash]), index >= 0, index < 10_000_000 else { return nil }
        let check = name[name.index(after: dash)...]
        guard check == DeviceToken.hex(derive("check \(index)", 4)) else { return nil }
        return subscription(index)
    }

    /// The index a path names, without deriving keys (`nil` when it is not a path of this seed).
    public func index(path: String) -> Int? {
        guard path.hasPrefix("/push/") else { return nil }
        let name = path.dropFirst("/push/".count)
        guard let dash = name.firstIndex(of: "-"), let index = Int(name[..<dash]), index >= 0 else { return nil }
        return name[name.index(after: dash)...] == DeviceToken.hex(derive("check \(index)", 4)) ? index : nil
    }

    private func derive(_ info: String, _ count: Int) -> [UInt8] {
        // HKDF never fails for these lengths.
        (try? HKDFSHA256.deriveKey(inputKeyingMaterial: Array(seed.utf8), salt: Array("herald webpush simulator".utf8),
                                   info: Array(info.utf8), outputLength: count)) ?? [UInt8](repeating: 0, count: count)
    }
}
