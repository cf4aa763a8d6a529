import FoundationEssentials

/// The bounds of the identifiers Herald accepts, defined once: every reader (the API's devices,
/// notifications and client tokens, the client token's claims, the CLI, the configuration)
/// checks the same field against the same bound here.
///
/// | Field | Bound |
/// |---|---|
/// | user id (`user`, `users[i]`, claim `sub`, `--user`) | 1–256 bytes of UTF-8 |
/// | app id (keys of `apps`, so every `app` a request names) | 1–256 bytes of UTF-8 |
/// | device token / device id (`token`, `tokens[i]`, claim `device`, `--token`, `--device`) | ``DeviceToken/byteLengthRange`` bytes, hex (``DeviceToken/normalize(_:)``) |
public enum FieldLimits {
    /// Length of a user id, in bytes of UTF-8.
    public static let userIDBytes = 1...256
    /// Length of an app id, in bytes of UTF-8.
    public static let appIDBytes = 1...256

    /// What is wrong with `user` as a user id, or `nil` when it is within bounds.
    public static func userProblem(_ user: String) -> String? {
        problem(user, userIDBytes)
    }

    /// What is wrong with `app` as an app id, or `nil` when it is within bounds.
    public static func appProblem(_ app: String) -> String? {
        problem(app, appIDBytes)
    }

    private static func problem(_ value: String, _ bounds: ClosedRange<Int>) -> String? {
        let n = value.utf8.count
        if n < bounds.lowerBound { return "must not be empty" }
        if n > bounds.upperBound { return "must be at most \(bounds.upperBound) bytes, found \(n)" }
        return nil
    }

    /// Records an error on each element of `node`'s array `key` that is not a valid user id
    /// (`users` of a notification).
    public static func checkUsers(_ node: JSONNode, _ key: String) {
        guard case .array(let items)? = node.value[key] else { return }
        for (index, item) in items.enumerated() {
            // Empty strings and non-strings are reported by the reader of the list.
            guard case .string(let user) = item, !user.isEmpty, let problem = userProblem(user) else { continue }
            node.context.error("\(node.path(of: key))[\(index)]", problem)
        }
    }
}
