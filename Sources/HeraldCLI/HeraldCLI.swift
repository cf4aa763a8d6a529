import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldServer
import HeraldSQLite

/// Herald's command line: one binary that is the daemon, the admin CLI and the simulators.
///
/// `main` registers the transport plugins and storage drivers and calls ``run(_:registry:storage:environment:)``.
public enum HeraldCLI {
    public static let version = "0.1.0"

    /// One command: its words and options, and what it does.
    package struct Command: Sendable {
        package var spec: CommandSpec
        package var run: @Sendable (ParsedArguments, CommandContext) async throws(CLIError) -> Void

        /// A command that runs `run` with its parsed options.
        package init(spec: CommandSpec, run: @escaping @Sendable (ParsedArguments, CommandContext) async throws(CLIError) -> Void) {
            self.spec = spec
            self.run = run
        }
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
        WebhooksCommand.list, WebhooksCommand.test,
        SimulateHTTP2Command.command,
        SimulateWebPushCommand.command,
        SimulateFCMCommand.command,
        SimulateBinaryCommands.gateway, SimulateBinaryCommands.feedback,
    ] + SimulateChinaCommand.commands

    /// What `herald bench …` answers: the benchmarks are a binary of their own.
    static let benchMoved = """
        herald bench: the benchmarks and load clients moved to their own binary, herald-bench
        (`swift build -c release --product herald-bench`; `make bench` builds and runs them).
        Run 'herald-bench --help' for the list.
        """

    static var overview: String {
        var text = """
        herald \(version): a push-notification gateway for APNs, FCM, Web Push, Huawei, Xiaomi, OPPO and vivo, with live streams for apps in the foreground.

        Usage: herald <command> [options]

        Commands:

        """
        let width = commands.map(\.spec.path.count).max() ?? 0
        for c in commands {
            text += "  \(c.spec.path)\(String(repeating: " ", count: width - c.spec.path.count + 2))\(c.spec.summary)\n"
        }
        text += """

        Commands that read the configuration (check, devices, client-token, send, prune, feedback, webhooks, serve) take
        --config PATH (default: $HERALD_CONFIG, else ./config.json).
        Run 'herald <command> --help' for its options.


        """
        return text + CLIError.exitCodes
    }

    /// Runs the command line `arguments` (without the program name); returns the exit code.
    /// - Parameters:
    ///   - registry: the transport plugins.
    ///   - storage: the storage drivers (default: SQLite, the embedded one).
    ///   - frontEnds: the front ends `herald serve` hosts beside the API (the Matrix gateway).
    public static func run(_ arguments: [String], registry: TransportRegistry, storage: StorageDrivers = .embedded,
                           frontEnds: [any FrontEnd.Type] = [],
                           environment: [String: String] = ProcessInfo.processInfo.environment) async -> Int32 {
        let context = CommandContext(registry: storage.sections(in: registry), storage: storage, environment: environment, frontEnds: frontEnds)
        if arguments.first == "bench" {
            context.console.errText(benchMoved)
            return 2
        }
        return await dispatch(arguments, program: "herald", commands: commands, overview: overview, context: context)
    }

    /// Finds the command `arguments` name (the longest path of leading words), parses its options
    /// and runs it; `--help`, `--version` and unknown commands are answered here. Shared by
    /// `herald` and `herald-bench`.
    /// - Parameters:
    ///   - program: the binary's name, in usage lines and errors.
    ///   - overview: printed for `--help` (and, as a usage error, for no command).
    /// - Returns: the exit code (``CLIError/exitCodes``).
    package static func dispatch(_ arguments: [String], program: String, commands: [Command], overview: String,
                                 context: CommandContext) async -> Int32 {
        let console = context.console
        if arguments.isEmpty {
            console.errText(overview)  // a usage error: no command
            return 2
        }
        if arguments == ["help"] || arguments.first == "--help" || arguments.first == "-h" {
            console.outText(overview)
            return 0
        }
        if arguments.first == "--version" || arguments.first == "version" {
            console.out("\(program) \(version)")
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
                    for c in group { console.out(lines: ["\(program) \(c.spec.usage)", "    \(c.spec.summary)"]) }
                    return 0
                }
                console.err("\(program) \(words.first!): expected one of: \(group.map { $0.spec.path }.joined(separator: ", "))")
                return 2
            }
            var message = "\(program): unknown command \"\(words.first ?? arguments[0])\""
            if let s = Spelling.closest(to: words.first ?? "", in: commands.map { String($0.spec.path.split(separator: " ")[0]) }) {
                message += "; did you mean \"\(s)\"?"
            }
            console.err(lines: [message, "Run '\(program) --help' for the list of commands."])
            return 2
        }
        do {
            let parsed = try command.spec.parse(Array(arguments.dropFirst(used)))
            if parsed.helpRequested {
                console.outText(command.spec.help(program: program))
                return 0
            }
            try await command.run(parsed, context)
            return 0
        } catch {
            console.err(lines: error.lines(program: program))
            return error.exitCode
        }
    }
}
