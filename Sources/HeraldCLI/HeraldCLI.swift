import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldSQLite

/// Herald's command line: one binary that is the daemon, the admin CLI and the simulators.
///
/// `main` registers the transport plugins and storage drivers and calls ``run(_:registry:storage:environment:)``.
public enum HeraldCLI {
    public static let version = "0.1.0"

    struct Command: Sendable {
        var spec: CommandSpec
        var run: @Sendable (ParsedArguments, CommandContext) async throws(CLIError) -> Void
    }

    static let commands: [Command] = [
        CheckCommand.command,
        DevicesCommands.add, DevicesCommands.list, DevicesCommands.remove,
        ClientTokenCommand.command,
        ServeCommand.command,
        SendCommand.command,
        PruneCommand.command,
        MigrateCommand.command,
        FeedbackCommand.command,
        SimulateHTTP2Command.command,
        SimulateFCMCommand.command,
        SimulateBinaryCommands.gateway, SimulateBinaryCommands.feedback,
        BenchCommand.command, BinaryBenchmark.command,
        CryptoBenchCommand.command, StreamDaemonBench.command,
        StreamBench.http, StreamBench.client,
    ]

    static var overview: String {
        var text = """
        herald \(version): a push-notification gateway for APNs.

        Usage: herald <command> [options]

        Commands:

        """
        let width = commands.map(\.spec.path.count).max() ?? 0
        for c in commands {
            text += "  \(c.spec.path)\(String(repeating: " ", count: width - c.spec.path.count + 2))\(c.spec.summary)\n"
        }
        text += """

        Commands that read the configuration (check, devices, client-token, send, prune, feedback, serve) take
        --config PATH (default: $HERALD_CONFIG, else ./config.json).
        Run 'herald <command> --help' for its options.


        """
        return text + CLIError.exitCodes
    }

    /// Runs the command line `arguments` (without the program name); returns the exit code.
    /// - Parameters:
    ///   - registry: the transport plugins.
    ///   - storage: the storage drivers (default: SQLite, the embedded one).
    public static func run(_ arguments: [String], registry: TransportRegistry, storage: StorageDrivers = .embedded,
                           environment: [String: String] = ProcessInfo.processInfo.environment) async -> Int32 {
        let context = CommandContext(registry: registry, storage: storage, environment: environment)
        let console = context.console
        if arguments.isEmpty {
            console.err(overview)  // a usage error: no command
            return 2
        }
        if arguments == ["help"] || arguments.first == "--help" || arguments.first == "-h" {
            console.out(overview)
            return 0
        }
        if arguments.first == "--version" || arguments.first == "version" {
            console.out("herald \(version)")
            return 0
        }
        // Longest command path that matches the leading words ("devices add" before "devices").
        let words = arguments.prefix { !$0.hasPrefix("-") }
        var match: Command? = nil
        var used = 0
        for c in commands {
            let path = c.spec.path.split(separator: " ").map(String.init)
            if path.count <= words.count, Array(words.prefix(path.count)) == path, path.count > used {
                match = c
                used = path.count
            }
        }
        guard let command = match else {
            let group = commands.filter { $0.spec.path.hasPrefix((words.first ?? "") + " ") }
            if !group.isEmpty {
                if words.count == 1 && arguments.contains(where: { $0 == "--help" || $0 == "-h" }) {
                    for c in group { console.out("herald \(c.spec.usage)\n    \(c.spec.summary)") }
                    return 0
                }
                console.err("herald \(words.first!): expected one of: \(group.map { $0.spec.path }.joined(separator: ", "))")
                return 2
            }
            var message = "herald: unknown command \"\(words.first ?? arguments[0])\""
            if let s = Spelling.closest(to: words.first ?? "", in: commands.map { String($0.spec.path.split(separator: " ")[0]) }) {
                message += "; did you mean \"\(s)\"?"
            }
            console.err(message + "\nRun 'herald --help' for the list of commands.")
            return 2
        }
        do {
            let parsed = try command.spec.parse(Array(arguments.dropFirst(used)))
            if parsed.helpRequested {
                console.out(command.spec.help)
                return 0
            }
            try await command.run(parsed, context)
            return 0
        } catch {
            console.err(error.description)
            return error.exitCode
        }
    }
}
