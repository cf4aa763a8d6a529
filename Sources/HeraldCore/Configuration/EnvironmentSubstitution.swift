/// Replaces `${NAME}` in configuration strings with environment variables.
///
/// Secrets stay out of `config.json`: `"secret": "${HERALD_API_KEY}"`. Every string value is
/// scanned; `${NAME}` may be the whole value or part of it (`"https://${APNS_HOST}:443"`), and
/// `$${` writes a literal `${`. A variable that is not set is an error naming the JSON path and
/// the variable (never its value).
public enum EnvironmentSubstitution {
    /// Substitutes throughout `value`, reporting missing variables into `context`.
    public static func apply(to value: JSONValue, environment: [String: String], context: JSONReadContext,
                             path: String = "") -> JSONValue {
        switch value {
        case .string(let s):
            guard s.contains("${") else { return value }
            return .string(substitute(s, environment: environment, path: path, context: context))
        case .array(let items):
            return .array(items.enumerated().map {
                apply(to: $0.element, environment: environment, context: context, path: "\(path)[\($0.offset)]")
            })
        case .object(let members):
            var out: [String: JSONValue] = [:]
            for (key, member) in members {
                out[key] = apply(to: member, environment: environment, context: context,
                                 path: JSONNode.childPath(path, key))
            }
            return .object(out)
        default:
            return value
        }
    }

    static func substitute(_ text: String, environment: [String: String], path: String, context: JSONReadContext) -> String {
        var result = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            result += rest[..<dollar]
            let after = rest[dollar...]
            if after.hasPrefix("$${") {
                result += "${"
                rest = after.dropFirst(3)
            } else if after.hasPrefix("${"), let close = after.firstIndex(of: "}") {
                let name = String(after[after.index(dollar, offsetBy: 2)..<close])
                if name.isEmpty || !(name.first!.isLetter || name.first! == "_")
                    || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) {
                    context.error(path, "\"${\(name)}\" is not a valid environment variable reference")
                } else if let replacement = environment[name] {
                    result += replacement
                } else {
                    context.error(path, "environment variable \(name) is not set")
                    result += "${\(name)}"  // keep the reference so no second error piles on
                }
                rest = after[after.index(after: close)...]
            } else {
                result += "$"
                rest = after.dropFirst()
            }
        }
        result += rest
        return result
    }
}
