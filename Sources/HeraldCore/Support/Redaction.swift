/// Helpers that keep device tokens short and secrets out of logs and error messages.
public enum Redact {
    /// A device token shortened for logs: the first 8 characters and an ellipsis.
    public static func token(_ token: String) -> String {
        token.count <= 8 ? token : String(token.prefix(8)) + "…"
    }
}

/// A string that must never be printed: its descriptions are always `<redacted>`.
///
/// Wrap keys, passphrases and API secrets in `Secret` as soon as they are read from the config,
/// so string interpolation in a log line or error message cannot leak them.
public struct Secret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The secret itself; read it only where it is used (signing, comparing, TLS).
    public let value: String

    public init(_ value: String) { self.value = value }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}
