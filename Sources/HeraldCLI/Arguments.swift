import HeraldAPNs
import HeraldCore

/// A command's options, parsed from `argv` without outside packages.
///
/// Accepts `--name value`, `--name=value` and bare flags; `-h`/`--help` anywhere asks for help.
/// Unknown options and missing values are usage errors that name the option and the command.
/// Package-wide so that `herald-bench` (`Sources/HeraldBench`) parses its options the same way.
package struct CommandSpec: Sendable {
    /// One `--name` option, a flag or a value.
    package struct Option: Sendable {
        package var name: String
        /// `nil` for a flag; else the placeholder shown in help (`APP`, `PATH`).
        package var value: String?
        package var help: String
        package var repeatable = false

        /// A bare `--name`.
        package static func flag(_ name: String, _ help: String) -> Option { Option(name: name, value: nil, help: help) }
        /// `--name VALUE` (`placeholder` is shown in help).
        package static func value(_ name: String, _ placeholder: String, _ help: String, repeatable: Bool = false) -> Option {
            Option(name: name, value: placeholder, help: help, repeatable: repeatable)
        }
    }

    /// `devices add`, `send`…
    package var path: String
    package var summary: String
    package var usage: String
    package var options: [Option]
    package var discussion: String = ""

    /// A command's words, one-line summary, usage line (without the program), options and help text.
    package init(path: String, summary: String, usage: String, options: [Option], discussion: String = "") {
        self.path = path
        self.summary = summary
        self.usage = usage
        self.options = options
        self.discussion = discussion
    }

    static let configOption = Option.value("config", "PATH", "configuration file (default: $HERALD_CONFIG, else ./config.json)")

    var help: String { help(program: "herald") }

    /// The `--help` text, with `program` (`herald`, `herald-bench`) in the usage line.
    func help(program: String) -> String {
        var text = "\(summary)\n\nUsage: \(program) \(usage)\n"
        if !discussion.isEmpty { text += "\n\(discussion)\n" }
        let all = options + [.flag("help", "show this help")]
        text += "\nOptions:\n"
        let width = all.map { "--\($0.name)" + ($0.value.map { " \($0)" } ?? "") }.map(\.count).max() ?? 0
        for option in all {
            let left = "--\(option.name)" + (option.value.map { " \($0)" } ?? "")
            let padding = String(repeating: " ", count: width - left.count + 2)
            text += "  \(left)\(padding)\(option.help)\(option.repeatable ? " (repeatable)" : "")\n"
        }
        return text
    }

    /// Parses `arguments` (after the command words).
    func parse(_ arguments: [String]) throws(CLIError) -> ParsedArguments {
        var parsed = ParsedArguments()
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "-h" || argument == "--help" { parsed.helpRequested = true; continue }
            guard argument.hasPrefix("--"), argument.count > 2 else {
                throw .usage("unexpected argument \"\(argument)\"", command: path)
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String? = nil
            if let eq = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard let option = options.first(where: { $0.name == name }) else {
                let known = options.map(\.name)
                var message = "unknown option --\(name)"
                if let suggestion = Spelling.closest(to: name, in: known) { message += "; did you mean --\(suggestion)?" }
                throw .usage(message, command: path)
            }
            if option.value == nil {
                if inlineValue != nil { throw .usage("--\(name) takes no value", command: path) }
                parsed.flags.insert(name)
                continue
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard index < arguments.count, !(arguments[index].hasPrefix("--") && arguments[index].count > 2) else {
                    throw .usage("--\(name) needs a value (\(option.value!))", command: path)
                }
                value = arguments[index]
                index += 1
            }
            if !option.repeatable, parsed.values[name] != nil {
                throw .usage("--\(name) given twice", command: path)
            }
            parsed.values[name, default: []].append(value)
        }
        return parsed
    }

}

/// Parsed options of one command.
package struct ParsedArguments: Sendable {
    var values: [String: [String]] = [:]
    var flags: Set<String> = []
    var helpRequested = false

    package func value(_ name: String) -> String? { values[name]?.last }
    package func all(_ name: String) -> [String] { values[name] ?? [] }
    package func flag(_ name: String) -> Bool { flags.contains(name) }

    /// A required value, or a usage error naming the option.
    package func required(_ name: String, command: String) throws(CLIError) -> String {
        guard let v = value(name), !v.isEmpty else { throw .usage("--\(name) is required", command: command) }
        return v
    }

    /// An integer value, or a usage error naming the option.
    package func int(_ name: String, command: String, in range: ClosedRange<Int>? = nil) throws(CLIError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let n = Int(text) else { throw .usage("--\(name): expected a whole number, found \"\(text)\"", command: command) }
        if let range, !range.contains(n) {
            throw .usage("--\(name): must be between \(range.lowerBound) and \(range.upperBound), found \(n)", command: command)
        }
        return n
    }
}

/// Why a command stopped; decides the exit code, which means the same for every command
/// (``exitCodes``).
package enum CLIError: Error, CustomStringConvertible {
    /// Bad command line or input (an option, a value, a token, an app that is not configured):
    /// exit 2, with a pointer to `--help`.
    case usage(String, command: String)
    /// Bad configuration or set-up (config file missing or invalid, a credential check failed,
    /// the store cannot be opened, the daemon cannot start): exit 3; one line per problem.
    case configuration([String])
    /// The command ran and part or all of its work failed (a delivery not delivered, a device
    /// not found, the store failing mid-way): exit 1.
    case runtime(String)

    var exitCode: Int32 {
        switch self {
        case .runtime: return 1
        case .usage: return 2
        case .configuration: return 3
        }
    }

    /// The exit codes, as `--help` and the README give them.
    static let exitCodes = """
        Exit codes (the same for every command):
          0  done: every delivery delivered, every check passed
          1  the command ran, but some of its work failed: a delivery rejected, invalid_token,
             expired or failed; a device not found; the store failing mid-way
          2  usage or input error: an unknown option, a bad value or token, an unknown app
          3  configuration or set-up error: config.json missing or invalid, a credential check
             failed, the store cannot be opened, the daemon cannot start
        """

    package var description: String { description(program: "herald") }

    /// The message, with `program` (`herald`, `herald-bench`) before the command.
    func description(program: String) -> String { lines(program: program).joined(separator: "\n") }

    /// The message as the lines printed (each escaped by ``Console``: a message may quote what a caller sent).
    func lines(program: String) -> [String] {
        switch self {
        case .usage(let message, let command):
            return ["\(program) \(command): \(message)", "See '\(program) \(command) --help'."]
        case .configuration(let lines):
            return lines
        case .runtime(let message):
            return ["\(program): \(message)"]
        }
    }
}
