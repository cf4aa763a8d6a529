import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldWebPush

/// Reads a `webpush` section as the daemon does; returns the configuration and the issues.
func readConfiguration(_ json: String, baseDirectory: String? = nil) -> (WebPushConfiguration?, [JSONIssue], [JSONIssue]) {
    let context = JSONReadContext(baseDirectory: baseDirectory)
    let value = try! JSONValue.parse(json)
    let c = WebPushTransport.configuration(from: JSONNode(root: value, context: context, path: "transports.web"))
    context.reportUnknownKeys()
    return (c, context.errors, context.warnings)
}

/// A fresh VAPID key as base64url of its raw scalar.
func newVAPIDKey() throws -> (P256PrivateKey, String) {
    let key = try P256PrivateKey.generate()
    return (key, Base64URL.encode(key.rawRepresentation))
}

/// A configuration that allows `allowed` (default: the browsers' services).
func configuration(allowed: [String]? = nil, extra: String = "") throws -> WebPushConfiguration {
    let (_, key) = try newVAPIDKey()
    let list = allowed.map { ", \"allowedEndpoints\": [" + $0.map { "\"\($0)\"" }.joined(separator: ", ") + "]" } ?? ""
    let (c, errors, _) = readConfiguration(#"{"type": "webpush", "vapidKey": "\#(key)", "subject": "mailto:push@example.com"\#(list)\#(extra)}"#)
    guard let c else { throw TestFailure("configuration refused: \(errors)") }
    return c
}

/// A subscription as a browser makes it, at `endpoint` (the simulator's keys, seed `test`).
func subscriptionJSON(endpoint: String = "https://fcm.googleapis.com/fcm/send/abc", index: Int = 0,
                      p256dh: String? = nil, auth: String? = nil) -> JSONValue {
    let s = SimulatedSubscriptions(seed: "test").subscription(index)
    return .object(["endpoint": .string(endpoint), "expirationTime": .null,
                    "keys": .object(["p256dh": .string(p256dh ?? s.privateKey.publicKey.base64URL),
                                     "auth": .string(auth ?? Base64URL.encode(s.auth))])])
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
