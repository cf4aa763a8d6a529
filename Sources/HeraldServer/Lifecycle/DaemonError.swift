import FoundationEssentials

/// The daemon cannot start or run; the message says what and what to do.
public struct DaemonError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
