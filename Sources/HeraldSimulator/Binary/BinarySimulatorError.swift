/// Why a simulator could not start or serve.
public struct BinarySimulatorError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
