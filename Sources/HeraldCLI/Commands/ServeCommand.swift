import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldServer

/// `herald serve`: the daemon.
enum ServeCommand {
    static let spec = CommandSpec(
        path: "serve",
        summary: "Run the daemon: HTTP API, durable queue, delivery workers, metrics.",
        usage: "serve [--config PATH]",
        options: [CommandSpec.configOption],
        discussion: """
        Listens on api.listen (JSON API under /v1, /healthz, /readyz, /metrics; see docs/openapi.yaml)
        and prints "herald: listening on HOST:PORT" on standard output once it serves. Logs go to
        standard error, one line per event, in log.format.

        With a "matrix" section it is also a Matrix push gateway: POST /_matrix/push/v1/notify for
        homeservers (no API key), on matrix.listen when set (then it prints "herald: matrix gateway
        listening on HOST:PORT" too), else on api.listen. See docs/matrix-gateway.md.

        Every accepted notification is committed to the queue (storage) before the API
        answers 202; workers deliver it through the app's transports, retry temporary failures and
        resume unfinished deliveries after a restart. Without at least one key in api.keys ([] counts
        as none) the API is open, so api.listen must then be a loopback address: any other is a
        configuration error at start and a refused reload on SIGHUP.

        Signals:
          SIGTERM, SIGINT  stop accepting, finish in-flight requests and batches within
                           server.shutdownDeadline, close the transports, exit 0.
          SIGHUP           reload the configuration file: keys, apps, routes, transports, tuning and
                           log settings. Unchanged transports keep their connections. A file with
                           errors, or a change to storage, api.listen, api.maxBodyBytes,
                           matrix.listen or server.connectionLimit/connectionTimeout/maxCommitBatch,
                           is refused and logged; the running configuration stays.

        Exit codes: 0 after a signal, 1 when the daemon stopped on a failure, 2 for a usage error,
        3 for a bad configuration or a daemon that cannot start (port taken, store unavailable).
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let path = context.configPath(arguments)
        let configuration: DaemonConfiguration
        do throws(ConfigurationError) {
            configuration = try DaemonConfiguration.load(path: path, registry: context.registry, environment: context.environment)
        } catch {
            throw .configuration(CommandContext.configurationErrorLines(path: path, error))
        }
        for warning in configuration.configuration.warnings { context.console.err("\(path): warning: \(warning)") }
        let daemon = Daemon(configuration: configuration, registry: context.registry, storage: context.storage,
                            options: Daemon.Options(environment: context.environment, announce: true, handleSignals: true,
                                                    frontEnds: context.frontEnds))
        do throws(DaemonError) {
            try await daemon.start()
        } catch {
            throw .configuration(["herald: \(error.message)"])
        }
        let code = await daemon.runUntilSignalled()
        if code != 0 { throw .runtime("the daemon stopped with code \(code)") }
    }
}
