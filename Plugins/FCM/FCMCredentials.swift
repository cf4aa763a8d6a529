import FoundationEssentials
import HeraldCore
import HeraldCrypto

/// A Google service account (`credentialsFile`): who signs the OAuth assertions and where they go.
///
/// Read from a service-account JSON file, or from the JSON itself when `credentialsFile` is a
/// `${ENV}` reference holding it. The private key is loaded when the configuration is read; a
/// key that cannot be loaded leaves ``signingKey`` `nil` and ``keyProblem`` saying why, and the
/// transport then pauses (`setupFailure`) instead of refusing the whole configuration.
///
/// - Important: the private key never appears in ``description``, logs, errors or `herald check`.
public struct FCMCredentials: Sendable, CustomStringConvertible {
    /// `project_id`.
    public var projectID: String
    /// `client_email`: the assertion's `iss`.
    public var clientEmail: String
    /// `private_key_id`: the assertion header's `kid`.
    public var privateKeyID: String
    /// `token_uri`: where assertions are exchanged for access tokens.
    public var tokenURI: FCMOrigin
    /// Where the account came from (`credentialsFile "sa.json"` or `the JSON in credentialsFile`).
    public var source: String
    /// The RS256 key (PKCS#8 or PKCS#1 PEM), when it could be loaded.
    public var signingKey: RS256SigningKey?
    /// Why the key cannot be used, when it cannot.
    public var keyProblem: String?

    /// What identifies these credentials for sharing one access token (never the key itself).
    var identity: String { "\(clientEmail)|\(privateKeyID)|\(tokenURI)" }

    public var description: String { "service account \(clientEmail) (key \(privateKeyID.prefix(8))…, project \(projectID))" }

    /// Reads `credentialsFile` from `node`, reporting problems with the key's JSON path.
    static func read(_ node: ConfigNode) -> FCMCredentials? {
        guard let raw = node.string("credentialsFile", required: true) else { return nil }
        let text: String
        let source: String
        if raw.trimmingWhitespace().hasPrefix("{") {
            text = raw
            source = "the JSON in credentialsFile"
        } else {
            guard let path = node.filePath("credentialsFile", required: true) else { return nil }
            guard let data = FileManager.default.contents(atPath: path) else {
                node.error(at: "credentialsFile", "cannot read \"\(path)\"; check its permissions")
                return nil
            }
            text = String(decoding: data, as: UTF8.self)
            source = "credentialsFile \"\(path)\""
        }
        return parse(text, source: source) { node.error(at: "credentialsFile", $0) }
    }

    /// Parses a service-account JSON text; `report` gets each problem (no secret in it).
    static func parse(_ text: String, source: String, report: (String) -> Void) -> FCMCredentials? {
        let json: JSONValue
        do { json = try JSONValue.parse(text) } catch {
            report("\(source) is not a service-account JSON file: \(error.description)")
            return nil
        }
        guard case .object = json else {
            report("\(source) is not a service-account JSON file: expected an object, found \(json.typeDescription)")
            return nil
        }
        if let type = json["type"]?.stringValue, type != "service_account" {
            report("\(source): type is \"\(type)\"; FCM needs a service account key (type \"service_account\"), made in the Google Cloud console under IAM → Service accounts → Keys")
            return nil
        }
        var missing: [String] = []
        func field(_ name: String) -> String? {
            guard let v = json[name]?.stringValue, !v.isEmpty else { missing.append(name); return nil }
            return v
        }
        let project = field("project_id"), email = field("client_email"), keyID = field("private_key_id")
        let pem = field("private_key")
        let tokenURIText = json["token_uri"]?.stringValue ?? "https://oauth2.googleapis.com/token"
        guard missing.isEmpty, let project, let email, let keyID, let pem else {
            report("\(source) lacks \(missing.joined(separator: ", ")); download a new key for the service account")
            return nil
        }
        guard let tokenURI = FCMOrigin(url: tokenURIText) else {
            report("\(source): token_uri must be an https URL such as \"https://oauth2.googleapis.com/token\", found \"\(tokenURIText)\"")
            return nil
        }
        var credentials = FCMCredentials(projectID: project, clientEmail: email, privateKeyID: keyID, tokenURI: tokenURI, source: source)
        do {
            credentials.signingKey = try RS256SigningKey(pem: pem)
        } catch {
            credentials.keyProblem = "\(source): private_key cannot be used: \(error.message)"
        }
        return credentials
    }
}

/// An `https://host[:port][/path]` URL as the FCM transport uses it (the send endpoint, the token URI).
public struct FCMOrigin: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// The path, `/` when none (`/token` for a token URI).
    public var path: String

    public init(host: String, port: Int = 443, path: String = "/") {
        self.host = host
        self.port = port
        self.path = path
    }

    /// Parses `https://host`, `https://host:port`, `https://[v6]:port/path`; `nil` for anything else.
    public init?(url: String) {
        guard url.hasPrefix("https://") else { return nil }
        var rest = Substring(url.dropFirst(8))
        var path = "/"
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        let host: String
        var port = 443
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()) else { return nil }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let p = Int(rest[rest.index(after: colon)...]) else { return nil }
            port = p
        } else {
            host = String(rest)
        }
        guard !host.isEmpty, (1...65535).contains(port), !path.contains("?"), !path.contains("#") else { return nil }
        self.host = host
        self.port = port
        self.path = path
    }

    /// `host:port` (IPv6 bracketed).
    public var authority: String { "\(host.contains(":") ? "[\(host)]" : host):\(port)" }
    public var description: String { "https://\(authority)\(path == "/" ? "" : path)" }
    var isLoopback: Bool { host == "localhost" || host == "::1" || host.hasPrefix("127.") }
}
