import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// A Google service account as the FCM simulator knows it: the identity and public key that
/// check the JWT assertions signed with its private key.
public struct FCMServiceAccount: Sendable {
    /// `project_id`: the project its access tokens may send for.
    public var projectID: String
    /// `client_email`: the assertion's `iss`.
    public var clientEmail: String
    /// `private_key_id`: the assertion header's `kid`.
    public var privateKeyID: String
    public var publicKey: RS256VerifyingKey

    public init(projectID: String, clientEmail: String, privateKeyID: String, publicKey: RS256VerifyingKey) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyID = privateKeyID
        self.publicKey = publicKey
    }

    /// A new account with a fresh 2048-bit RSA key, and its service-account JSON file text
    /// (`type`, `project_id`, `private_key_id`, `private_key`, `client_email`, `client_id`,
    /// `auth_uri`, `token_uri`, as Google's console writes it) with `token_uri` as given.
    /// - Important: the JSON holds the private key; write it only where tests or the operator want it.
    /// - Parameter key: the account's key; a new 2048-bit one when nil (tests pass one they made
    ///   once: each new key costs 0.1–1 s of CPU).
    public static func generate(projectID: String, clientEmail: String? = nil, tokenURI: String,
                                key given: RS256SigningKey? = nil) throws(CryptoError) -> (account: FCMServiceAccount, json: String) {
        let key: RS256SigningKey
        if let given { key = given } else { key = try RS256SigningKey.generate(bits: 2048) }
        let keyID = randomHex(20)
        let email = clientEmail ?? "herald-sim-\(randomHex(4))@\(projectID).iam.gserviceaccount.com"
        let account = FCMServiceAccount(projectID: projectID, clientEmail: email, privateKeyID: keyID, publicKey: key.verifyingKey)
        var w = JSONWriter(capacity: 2600)
        w.object { o in
            o.string("type", "service_account")
            o.string("project_id", projectID)
            o.string("private_key_id", keyID)
            o.string("private_key", key.pemRepresentation)
            o.string("client_email", email)
            o.string("client_id", String(UInt64.random(in: 100_000_000_000_000_000...999_999_999_999_999_999)))
            o.string("auth_uri", "https://accounts.google.com/o/oauth2/auth")
            o.string("token_uri", tokenURI)
            o.string("auth_provider_x509_cert_url", "https://www.googleapis.com/oauth2/v1/certs")
            o.string("universe_domain", "googleapis.com")
        }
        return (account, w.string)
    }

    /// The account of a service-account JSON file (its public key from the private key).
    /// - Throws: ``FCMSimulatorError`` naming the missing field or the unreadable key.
    public static func read(json text: String, source: String) throws(FCMSimulatorError) -> FCMServiceAccount {
        let json: JSONValue
        do { json = try JSONValue.parse(text) } catch { throw FCMSimulatorError("\(source): not JSON: \(error.description)") }
        func field(_ name: String) throws(FCMSimulatorError) -> String {
            guard let v = json[name]?.stringValue, !v.isEmpty else { throw FCMSimulatorError("\(source): \(name) is missing") }
            return v
        }
        let pem = try field("private_key")
        let key: RS256SigningKey
        do { key = try RS256SigningKey(pem: pem) } catch {
            throw FCMSimulatorError("\(source): private_key: \(error.message)")
        }
        return FCMServiceAccount(projectID: try field("project_id"), clientEmail: try field("client_email"),
                                 privateKeyID: try field("private_key_id"), publicKey: key.verifyingKey)
    }

    static func randomHex(_ bytes: Int) -> String {
        var s = ""
        for _ in 0..<bytes {
            let b = UInt8.random(in: 0...255)
            s += String(b >> 4, radix: 16) + String(b & 15, radix: 16)
        }
        return s
    }
}

/// Why the FCM simulator could not be set up or started; the message names the cause and the fix.
public struct FCMSimulatorError: Error, CustomStringConvertible, Sendable, Equatable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
