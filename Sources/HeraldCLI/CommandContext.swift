import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldServer
import HeraldSQLite

/// What every command shares: the environment, the registry, and loading the config.
package struct CommandContext: Sendable {
    package var registry: TransportRegistry
    package var storage: StorageDrivers
    package var environment: [String: String]
    /// The front ends `herald serve` hosts beside the API.
    package var frontEnds: [any FrontEnd.Type] = []
    package var console = Console()

    /// The plugins, drivers, front ends and environment commands run with.
    package init(registry: TransportRegistry, storage: StorageDrivers, environment: [String: String], frontEnds: [any FrontEnd.Type] = []) {
        self.registry = registry
        self.storage = storage
        self.environment = environment
        self.frontEnds = frontEnds
    }

    /// The config path: `--config`, else `$HERALD_CONFIG`, else `./config.json`.
    func configPath(_ arguments: ParsedArguments) -> String {
        arguments.value("config") ?? environment["HERALD_CONFIG"].flatMap { $0.isEmpty ? nil : $0 } ?? "config.json"
    }

    /// Loads and validates the configuration; prints warnings to stderr.
    /// - Throws: ``CLIError/configuration(_:)`` with every error, each with its JSON path.
    func loadConfiguration(_ arguments: ParsedArguments, quiet: Bool = false) throws(CLIError) -> HeraldConfiguration {
        let path = configPath(arguments)
        do {
            let configuration = try HeraldConfiguration.load(path: path, registry: registry, environment: environment)
            if !quiet {
                for warning in configuration.warnings { console.err("\(path): warning: \(warning)") }
            }
            return configuration
        } catch {
            throw .configuration(Self.configurationErrorLines(path: path, error))
        }
    }

    /// The lines that report a configuration that cannot be used: its warnings, every error with
    /// its JSON path, and, when there is no file, where Herald looked and how to name another.
    static func configurationErrorLines(path: String, _ error: ConfigurationError) -> [String] {
        var lines = error.warnings.map { "\(path): warning: \($0)" }
        lines += error.errors.map { "\(path): \($0)" }
        if !FileManager.default.fileExists(atPath: path) {
            lines.append("herald: no configuration file at \(path); give its path with --config PATH, or set HERALD_CONFIG "
                         + "(without either, Herald reads ./config.json in the current folder)")
        } else {
            lines.append("herald: the configuration has \(error.errors.count) error\(error.errors.count == 1 ? "" : "s")")
        }
        return lines
    }

    /// A logger per the configuration; the CLI shows warnings and worse unless `--verbose`.
    func logger(_ configuration: HeraldConfiguration, verbose: Bool) -> Logger {
        let level = verbose ? configuration.log.level : max(configuration.log.level, .warning)
        return Logger(label: "herald", level: level,
                      handler: StreamLogHandler.standardError(format: configuration.log.format))
    }

    /// Opens the token store the configuration names.
    func openStore(_ configuration: HeraldConfiguration) async throws(CLIError) -> any TokenStore {
        do {
            return try await storage.driver(for: configuration).openTokenStore(configuration)
        } catch {
            throw .configuration(["herald: cannot open the store: \(error)"])
        }
    }

    /// The app named by `--app`, or a usage error listing the configured apps.
    func app(_ id: String, in configuration: HeraldConfiguration, command: String) throws(CLIError) -> AppConfiguration {
        guard let app = configuration.app(id) else {
            let known = configuration.apps.keys.sorted().joined(separator: ", ")
            var message = "--app: unknown app \"\(id)\"; configured: \(known)"
            if let s = Spelling.closest(to: id, in: configuration.apps.keys) { message += " (did you mean \"\(s)\"?)" }
            throw .usage(message, command: command)
        }
        return app
    }

    /// Builds (and starts) the named transports. Ones that fail are returned with the reason,
    /// so their deliveries fail clearly while the others work.
    func startTransports(_ names: [String], configuration: HeraldConfiguration, logger: Logger,
                         metrics: MetricsRegistry) async -> (started: [String: any Transport], unavailable: [String: String]) {
        var started: [String: any Transport] = [:]
        var unavailable: [String: String] = [:]
        for name in Set(names).sorted() {
            guard let spec = configuration.transports[name] else { continue }
            let context = TransportContext(logger: logger.labeled("transport.\(name)"), metrics: metrics,
                                           durableWrites: configuration.storage.durableWrites)
            do {
                let transport = try registry.makeTransport(spec, context: context)
                try await transport.start()
                started[name] = transport
            } catch {
                unavailable[name] = String(describing: error)
                logger.error("transport failed to start", ["transport": name, "error": String(describing: error)])
            }
        }
        return (started, unavailable)
    }
}
