import FoundationEssentials
import Glibc
import HeraldCore

/// A configuration plus the JSON of each transport section, so a reload can tell which
/// transports changed (and keep the connections of those that did not).
public struct DaemonConfiguration: Sendable {
    public var configuration: HeraldConfiguration
    /// `transports.<name>` after `${VAR}` substitution.
    public var transportSections: [String: JSONValue]

    public init(configuration: HeraldConfiguration, transportSections: [String: JSONValue]) {
        self.configuration = configuration
        self.transportSections = transportSections
    }

    /// Loads and validates a configuration file.
    public static func load(path: String, registry: TransportRegistry, environment: [String: String])
        throws(ConfigurationError) -> DaemonConfiguration
    {
        let configuration = try HeraldConfiguration.load(path: path, registry: registry, environment: environment)
        let data = (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data()
        return DaemonConfiguration(configuration: configuration, transportSections: sections(data, environment: environment))
    }

    /// Parses configuration JSON (tests and embedders).
    public static func parse(_ data: Data, baseDirectory: String?, registry: TransportRegistry, environment: [String: String])
        throws(ConfigurationError) -> DaemonConfiguration
    {
        let configuration = try HeraldConfiguration.parse(data, baseDirectory: baseDirectory, registry: registry, environment: environment)
        return DaemonConfiguration(configuration: configuration, transportSections: sections(data, environment: environment))
    }

    private static func sections(_ data: Data, environment: [String: String]) -> [String: JSONValue] {
        guard let json = try? JSONValue.parse(data) else { return [:] }
        let substituted = EnvironmentSubstitution.apply(to: json, environment: environment, context: JSONReadContext())
        return substituted["transports"]?.objectValue ?? [:]
    }
}
