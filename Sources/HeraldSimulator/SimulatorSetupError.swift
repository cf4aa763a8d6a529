/// Why a piece shared by the simulators (listening socket, TLS context, record file) could not
/// be set up; the message names the cause and the fix.
///
/// Internal: each simulator wraps it in its own public error (``HTTP2SimulatorError``,
/// ``BinarySimulatorError``) with the same message.
struct SimulatorSetupError: Error, CustomStringConvertible, Sendable {
    var description: String
    init(_ description: String) { self.description = description }
}

extension HTTP2SimulatorError {
    /// The shared error, as the HTTP/2 simulator reports it (same message).
    init(_ error: SimulatorSetupError) { self.init(error.description) }
}

extension BinarySimulatorError {
    /// The shared error, as the binary simulators report it (same message).
    init(_ error: SimulatorSetupError) { self.init(error.description) }
}
