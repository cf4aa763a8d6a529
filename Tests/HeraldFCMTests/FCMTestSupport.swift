import Foundation
import HeraldCore
import HeraldCrypto
import HeraldSimulator
import HeraldTestKit
@testable import HeraldFCM

/// Service-account files for tests (one RSA key per process: keys are slow to make).
enum TestAccounts {
    static let projectID = "herald-sim"
    static let made: (account: FCMServiceAccount, json: String) = {
        try! FCMServiceAccount.generate(projectID: projectID, clientEmail: "herald-test@herald-sim.iam.gserviceaccount.com",
                                        tokenURI: "https://127.0.0.1:1/token", key: TestKeys.rsa)
    }()

    /// The account JSON with `token_uri` replaced.
    static func json(tokenURI: String = "https://127.0.0.1:1/token", edit: (inout [String: JSONValue]) -> Void = { _ in }) -> String {
        var members = try! JSONValue.parse(made.json).objectValue!
        members["token_uri"] = .string(tokenURI)
        edit(&members)
        return JSONValue.object(members).jsonString
    }
}

/// Reads an `fcm` section: the configuration, the errors and the warnings.
func readFCMConfig(_ json: JSONValue, baseDirectory: String = "/") -> (FCMConfiguration?, [String], [String]) {
    let context = JSONReadContext(baseDirectory: baseDirectory)
    let node = JSONNode(root: json, context: context)
    let c = FCMTransport.configuration(from: node)
    context.reportUnknownKeys()
    return (c, context.errors.map(\.description), context.warnings.map(\.description))
}

/// A registration token of realistic shape (152 bytes).
func registrationToken(_ n: Int = 1) -> String {
    let head = "d\(n)x:APA91b"
    return head + String(repeating: "Qz9_-k", count: (152 - head.count) / 6 + 1).prefix(152 - head.count)
}
