import HeraldCore

/// Checks `Authorization: Bearer <secret>` against the configured API keys, in constant time.
///
/// With no keys configured the API is open (the configuration allows that only on a loopback
/// address). Every key is compared on every request, so timing reveals neither which key
/// matched nor how much of a secret was right.
struct Authenticator: Sendable {
    struct Key: Sendable {
        var id: String
        var secret: [UInt8]
        var scopes: Set<APIConfiguration.Scope>
    }

    let keys: [Key]

    init(_ configuration: APIConfiguration) {
        keys = configuration.keys.map { Key(id: $0.id, secret: Array($0.secret.value.utf8), scopes: $0.scopes) }
    }

    /// Whether requests need a key at all.
    var isOpen: Bool { keys.isEmpty }

    /// The key id for a request that may use `scope`, or the 401/403 error.
    func authorize(_ header: String?, scope: APIConfiguration.Scope) -> Result<String?, APIError> {
        if isOpen { return .success(nil) }
        let challenge = ["WWW-Authenticate": "Bearer realm=\"herald\""]
        guard let header, header.count > 7, header.prefix(7).lowercased() == "bearer " else {
            return .failure(APIError(status: 401, code: "unauthorized",
                                     message: "send an API key as \"Authorization: Bearer <key>\"", headers: challenge))
        }
        let presented = Array(header.utf8.dropFirst(7))
        var match: Key? = nil
        for key in keys where Self.constantTimeEquals(presented, key.secret) {
            match = key
        }
        guard let key = match else {
            return .failure(APIError(status: 401, code: "unauthorized", message: "the API key is not valid", headers: challenge))
        }
        guard key.scopes.contains(scope) || key.scopes.contains(.admin) else {
            return .failure(APIError(status: 403, code: "forbidden",
                                     message: "API key \"\(key.id)\" lacks the \"\(scope.rawValue)\" scope"))
        }
        return .success(key.id)
    }

    /// Compares without an early exit; the time depends only on the lengths.
    static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= x ^ y
        }
        return difference == 0 && a.count == b.count
    }
}
