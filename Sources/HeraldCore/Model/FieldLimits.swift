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
/// | a value sent as (part of) a platform request's header (`collapse_key`, `apns.collapse_id`, `webpush.topic`, …) | no control character (``headerValueProblem(_:)``) |
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

    /// What makes `value` unfit to become a header value (or part of one) of a platform request,
    /// or `nil` when it is fit: a control character (C0 such as CR, LF, NUL and TAB; DEL; C1),
    /// which could end the header early or add one of the caller's own.
    ///
    /// Every reader of such a field calls it when the request is accepted and refuses the value
    /// naming the field (`collapse_key: contains a control character (CR)`); nothing is stripped.
    public static func headerValueProblem(_ value: String) -> String? {
        for scalar in value.unicodeScalars where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
            return "contains a control character (\(controlName(scalar)))"
        }
        return nil
    }

    /// A control character's short name (`CR`, `LF`, `NUL`, `TAB`, `DEL`), else `U+001B`.
    public static func controlName(_ scalar: Unicode.Scalar) -> String {
        switch scalar.value {
        case 0x00: return "NUL"
        case 0x09: return "TAB"
        case 0x0A: return "LF"
        case 0x0D: return "CR"
        case 0x7F: return "DEL"
        default:
            let hex = String(scalar.value, radix: 16, uppercase: true)
            return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        }
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
