import FoundationEssentials
import Glibc
import HeraldCore

/// A configuration plus what a reload compares per transport: the JSON of its section and the
/// content of the files it names (keys, certificates), so a transport whose key file was
/// replaced counts as changed even when the config text did not change.
public struct DaemonConfiguration: Sendable {
    public var configuration: HeraldConfiguration
    /// `transports.<name>` after `${VAR}` substitution.
    public var transportSections: [String: JSONValue]

    public init(configuration: HeraldConfiguration, transportSections: [String: JSONValue]) {
        self.configuration = configuration
        self.transportSections = transportSections
    }

    /// Loads and validates a configuration file, reading it once (a write during a reload
    /// cannot mix two versions).
    public static func load(path: String, registry: TransportRegistry, environment: [String: String])
        throws(ConfigurationError) -> DaemonConfiguration
    {
        let (configuration, data) = try HeraldConfiguration.loadWithData(path: path, registry: registry, environment: environment)
        return DaemonConfiguration(configuration: configuration, transportSections: sections(data, environment: environment))
    }

    /// Parses configuration JSON (tests and embedders).
    public static func parse(_ data: Data, baseDirectory: String?, registry: TransportRegistry, environment: [String: String])
        throws(ConfigurationError) -> DaemonConfiguration
    {
        let configuration = try HeraldConfiguration.parse(data, baseDirectory: baseDirectory, registry: registry, environment: environment)
        return DaemonConfiguration(configuration: configuration, transportSections: sections(data, environment: environment))
    }

    /// Whether transport `name` must be rebuilt to go from `self` to `next`: its section, its
    /// type, or the content of a file it names changed.
    func transportChanged(_ name: String, in next: DaemonConfiguration) -> Bool {
        transportSections[name] != next.transportSections[name]
            || configuration.transports[name]?.kind != next.configuration.transports[name]?.kind
            || files(of: name) != next.files(of: name)
    }

    /// The digests of the files transport `name` names, by JSON path.
    private func files(of name: String) -> [String: UInt64] {
        let section = JSONNode.childPath("transports", name)
        return configuration.fileDigests.filter { $0.key.hasPrefix(section + ".") || $0.key.hasPrefix(section + "[") }
    }

    private static func sections(_ data: Data, environment: [String: String]) -> [String: JSONValue] {
        guard let json = try? JSONValue.parse(data) else { return [:] }
        let substituted = EnvironmentSubstitution.apply(to: json, environment: environment, context: JSONReadContext())
        return substituted["transports"]?.objectValue ?? [:]
    }
}
