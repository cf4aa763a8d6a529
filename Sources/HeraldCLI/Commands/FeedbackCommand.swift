import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// `herald feedback`: read the dead tokens a transport's peer reports (APNs' feedback service)
/// and retire them in the store, with Apple's timestamp rule.
enum FeedbackCommand {
    static let command = HeraldCLI.Command(spec: CommandSpec(
        path: "feedback",
        summary: "Read dead tokens from the feedback service and retire them in the store.",
        usage: "feedback [--transport NAME] [--dry-run] [--config PATH]",
        options: [
            CommandSpec.configOption,
            .value("transport", "NAME", "read only this transport (default: every transport with a feedback service)"),
            .flag("dry-run", "print what would be retired and change nothing"),
        ],
        discussion: """
        For each report: `retired` (the device is now invalid), `kept` (registered again after
        Apple's time, so it stays), `already invalid` or `unknown`. A report names no app, so it
        applies to every app that routes through the transport.
        With --dry-run the store is left alone; APNs' feedback service forgets what it sent, so
        the reports of a dry run are gone (the next read has only newer ones).
        The daemon (`herald serve`) reads the same service every `feedbackInterval`.
        """)) { arguments, context throws(CLIError) in
        let configuration = try context.loadConfiguration(arguments)
        let logger = context.logger(configuration, verbose: false)
        let names: [String]
        if let name = arguments.value("transport") {
            guard configuration.transports[name] != nil else {
                throw .usage("--transport: no transport \"\(name)\"; configured: \(configuration.transports.keys.sorted().joined(separator: ", "))",
                             command: "feedback")
            }
            names = [name]
        } else {
            names = configuration.transports.keys.sorted()
        }
        let dryRun = arguments.flag("dry-run")
        let store = try await context.openStore(configuration)
        let invalidator = TokenInvalidator(store: store, logger: logger, metrics: MetricsRegistry())
        let console = context.console
        var sources = 0
        var failures: [String] = []
        for name in names {
            let spec = configuration.transports[name]!
            let transport: any Transport
            do {
                transport = try context.registry.makeTransport(spec, context: TransportContext(logger: logger.labeled("transport.\(name)")))
            } catch {
                failures.append("\(name): \(error)")
                continue
            }
            guard let source = transport as? any DeadTokenSource else {
                if arguments.value("transport") != nil {
                    throw .usage("--transport: \(name) (\(spec.kind)) has no feedback service", command: "feedback")
                }
                continue
            }
            sources += 1
            let reports: [DeadToken]
            do { reports = try await source.fetchDeadTokens() } catch {
                failures.append("\(name): \(error)")
                continue
            }
            console.out("\(name): \(reports.count) dead token\(reports.count == 1 ? "" : "s") reported")
            if dryRun {
                let apps = configuration.apps.values.filter { $0.routes.contains(name) }.map(\.id).sorted()
                for report in reports {
                    for app in apps {
                        let device = try? await store.device(app: app, token: report.token)
                        let verdict: String
                        if let device {
                            verdict = device.invalidatedAt != nil ? "already invalid" : device.updatedAt > report.since ? "would keep (registered again after)" : "would retire"
                        } else {
                            verdict = "unknown"
                        }
                        console.out("  \(verdict): \(Redact.token(report.token)) app \(app) since \(report.since.iso8601)")
                    }
                }
                continue
            }
            for (report, app, result) in await invalidator.apply(reports, transport: name, configuration: configuration) {
                let verdict: String
                switch result {
                case .invalidated?: verdict = "retired"
                case .keptReRegistered?: verdict = "kept (registered again after)"
                case .alreadyInvalid?: verdict = "already invalid"
                case .unknown?: verdict = "unknown"
                case nil: verdict = "not applied (store error)"
                }
                console.out("  \(verdict): \(Redact.token(report.token)) app \(app) since \(report.since.iso8601)")
            }
        }
        if sources == 0 && failures.isEmpty {
            throw .configuration(["herald: no configured transport has a feedback service (apns-binary has one)"])
        }
        if !failures.isEmpty { throw .runtime("cannot read the feedback service of " + failures.joined(separator: "; ")) }
    }
}
