import HeraldAPNs
import HeraldCore
import HeraldGorush
import HeraldMatrix

/// `herald check`: validate the configuration and the credentials it names.
enum CheckCommand {
    static let spec = CommandSpec(
        path: "check",
        summary: "Validate the configuration and the credentials it names; print a summary.",
        usage: "check [--config PATH] [--quiet]",
        options: [CommandSpec.configOption, .flag("quiet", "print nothing on success")],
        discussion: """
        Reports every configuration error with its JSON path and exits 2 when there is one.
        Loads each transport's key or certificate and reports subject, topics and expiry.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let configuration = try context.loadConfiguration(arguments)
        let console = context.console
        let logger = Logger(label: "check", level: .error,
                            handler: StreamLogHandler.standardError(format: configuration.log.format))
        var failures = 0
        var lines: [String] = []
        lines.append("config: \(configuration.sourcePath ?? "-")")
        lines.append("storage (\(configuration.storage.driver)):")
        do {
            for finding in await (try context.storage.driver(for: configuration)).describe(configuration) {
                if finding.severity == .error { failures += 1 }
                lines.append("    \(finding)")
            }
        } catch {
            failures += 1
            lines.append("    error: \(error)")
        }
        lines.append("apps (\(configuration.apps.count)):")
        for id in configuration.apps.keys.sorted() {
            let a = configuration.apps[id]!
            var line = "  \(id): topic=\(a.topic) routes=\(a.routes.joined(separator: ",")) foreground=\(a.foreground.rawValue) maxDevicesPerUser=\(a.maxDevicesPerUser) maxRegisteredDevicesPerUser=\(a.maxRegisteredDevicesPerUser)"
            if let secret = a.clientSecret { line += " clientSecret=\(secret)" }  // Secret prints "<redacted>"
            if a.foreground != .pushOnly { line += " presenceGrace=\(a.presenceGrace)s inbox.ttl=\(a.inbox.ttl)s inbox.maxPerUser=\(a.inbox.maxPerUser)" }
            lines.append(line)
        }
        lines.append("transports (\(configuration.transports.count)):")
        for name in configuration.transports.keys.sorted() {
            let spec = configuration.transports[name]!
            lines.append("  \(name): \(spec.kind) \(spec.configuration.summary)")
            do {
                let transport = try context.registry.makeTransport(spec, context: TransportContext(logger: logger))
                for finding in await transport.checkReport() {
                    if finding.severity == .error { failures += 1 }
                    lines.append("    \(finding)")
                }
                await transport.shutdown()
            } catch {
                failures += 1
                lines.append("    error: \(error)")
            }
        }
        let keys = configuration.api.keys.map { "\($0.id) (\($0.scopes.map(\.rawValue).sorted().joined(separator: ", ")))" }
        lines.append("api: listen \(configuration.api.listen), \(keys.isEmpty ? "no keys (loopback only, unauthenticated)" : "keys: " + keys.joined(separator: "; "))")
        let streams = configuration.api.streams
        lines.append("  streams: heartbeat=\(streams.heartbeat)s maxStreams=\(streams.maxStreams) bufferBytes=\(streams.bufferBytes) demo=\(configuration.api.demo)")
        let matrix = configuration.matrixReport()
        lines += matrix.lines
        failures += matrix.errors
        let gorush = configuration.gorushReport()
        lines += gorush.lines
        failures += gorush.errors
        lines.append("log: level=\(configuration.log.level.rawValue) format=\(configuration.log.format.rawValue)")
        let r = configuration.delivery.retry
        lines.append("delivery: maxAttempts=\(r.maxAttempts) backoff=\(r.initialDelay)s…\(r.maxDelay)s batchSize=\(configuration.delivery.batchSize)")
        if failures > 0 {
            lines.forEach { console.err($0) }
            throw .configuration(["herald: \(failures) check\(failures == 1 ? "" : "s") failed"])
        }
        if !arguments.flag("quiet") {
            lines.forEach { console.out($0) }
            console.out("configuration OK" + (configuration.warnings.isEmpty ? "" : " (\(configuration.warnings.count) warning\(configuration.warnings.count == 1 ? "" : "s"))"))
        }
    }
}
