import APNsBinaryProtocol
import FoundationEssentials
import HeraldAPNs
import HeraldCore
import HeraldSimulator
#if canImport(Glibc)
import Glibc
#endif

/// `herald simulate apns-binary` and `herald simulate feedback`: Apple's legacy binary gateway
/// and feedback service as real servers, for testing providers that speak the binary API.
enum SimulateBinaryCommands {
    private static let tlsOptions: [CommandSpec.Option] = [
        .value("host", "ADDRESS", "IP address to listen on (default 127.0.0.1)"),
        .value("tls-cert", "PATH", "server certificate (PEM)"),
        .value("tls-key", "PATH", "server private key (PEM, unencrypted)"),
        .value("client-ca", "PATH", "CA certificates (PEM) client certificates must chain to; clients without one are refused at the handshake"),
        .flag("plaintext", "serve plain TCP instead of TLS (debugging; no client certificate, so no topic)"),
        .value("record", "FILE", "write one JSON object per event (connected, notification, error, refused, feedback) to FILE"),
        .flag("verbose", "log every notification (debug), not only connections and errors"),
    ]

    static let gateway = HeraldCLI.Command(spec: CommandSpec(
        path: "simulate apns-binary",
        summary: "Run a simulator of APNs' legacy binary gateway (commands 0, 1, 2; error responses; mutual TLS).",
        usage: "simulate apns-binary [--port PORT] (--tls-cert PEM --tls-key PEM --client-ca PEM | --plaintext) [faults] [--record FILE]",
        options: [.value("port", "PORT", "port to listen on (default 2195; 0 picks a free one)")] + tlsOptions + [
            .value("invalid-tokens", "FILE", "tokens rejected with status 8 (one hex token per line, # comments)"),
            .value("fail-token", "HEX=STATUS", "reject this token with any status, e.g. 1 (processing error) or 255", repeatable: true),
            .value("shutdown-after", "N", "after N accepted notifications on a connection, send status 10 and close (0: at once)"),
            .value("drop-after", "N", "after N accepted notifications on a connection, drop it without an error response"),
            .value("payload-limit", "BYTES", "largest command-2 payload (default 2048); larger → status 7"),
            .value("legacy-payload-limit", "BYTES", "largest command-0/1 payload (default 2048; 256 before iOS 8); larger → status 7"),
            .value("max-token-size", "BYTES", "largest command-2 token (default 32; Apple's last docs allowed up to 100); else → status 5"),
            .value("max-topic-size", "BYTES", "longest certificate topic (default 255); longer → status 6"),
            .flag("allow-missing-topic", "accept clients whose certificate names no topic (default: status 3)"),
            .value("protocol-error-status", "N", "status for unparsable input: 128 (default, Apple's \"protocol error\"), or 255, or 1"),
            .value("uninstalled-tokens", "FILE", "tokens of removed apps: accepted, then listed by the feedback service"),
            .value("feedback-port", "PORT", "also serve the feedback service from this process, on PORT (0 picks one)"),
            .value("dead-tokens", "FILE", "with --feedback-port: initial feedback list, \"<hex token> [unix-time]\" per line"),
        ],
        discussion: """
        Prints "listening on HOST:PORT" as its first line on stdout (and, with --feedback-port,
        "feedback listening on HOST:PORT" next); logs go to stderr. Runs until SIGINT or SIGTERM.

        Accepted notifications get no answer. The first invalid one gets the 6-byte error
        response [8][status][identifier] (identifier 0 if the notification had none); then the
        connection closes and everything sent after it is discarded, as Apple did:
          1   processing error     --fail-token HEX=1
          2   missing token        command 2 without item 1, or a token of length 0
          3   missing topic        the client certificate has no UID and no topics extension
          4   missing payload      command 2 without item 2, or a payload of length 0
          5   invalid token size   commands 0/1: not 32 bytes; command 2: not 32..--max-token-size
          6   invalid topic size   the certificate's topic is longer than --max-topic-size
          7   invalid payload size over --payload-limit (command 2) or --legacy-payload-limit (0/1)
          8   invalid token        a token listed in --invalid-tokens
          10  shutdown             after --shutdown-after N notifications on one connection; the
                                   identifier is the last accepted notification's
          128 protocol error       unknown command or item id, wrong-size identifier/expiry/priority
                                   item, a repeated item, items overrunning the frame, priority not
                                   5 or 10 (see --protocol-error-status)
          255 unknown              --fail-token HEX=255
        Payloads are not checked for JSON (Apple's gateway had no status for it); non-JSON
        payloads are accepted and recorded with "json": false.
        """), run: runGateway)

    static let feedback = HeraldCLI.Command(spec: CommandSpec(
        path: "simulate feedback",
        summary: "Run a simulator of APNs' legacy feedback service (dead-token tuples, then close).",
        usage: "simulate feedback [--port PORT] (--tls-cert PEM --tls-key PEM --client-ca PEM | --plaintext) [--dead-tokens FILE]",
        options: [.value("port", "PORT", "port to listen on (default 2196; 0 picks a free one)")] + tlsOptions + [
            .value("dead-tokens", "FILE", "the feedback list, \"<hex token> [unix-time]\" per line (time defaults to now)"),
        ],
        discussion: """
        Prints "listening on HOST:PORT" as its first line on stdout. Each connection receives
        every listed token as [time u32][length u16][token] (big-endian), then the service closes
        the connection; the list is then empty, as Apple's was "cleared after you read it".
        Runs until SIGINT or SIGTERM.
        """), run: runFeedback)

    // MARK: Running

    private static func runGateway(_ arguments: ParsedArguments, _ context: CommandContext) async throws(CLIError) {
        let path = "simulate apns-binary"
        let logger = makeLogger(arguments)
        let tls = try tlsFiles(arguments, command: path)
        var rules = APNsBinaryRules()
        do {
            if let file = arguments.value("invalid-tokens") { rules.invalidTokens = Set(try BinaryTokenFile.tokens(path: file)) }
            for text in arguments.all("fail-token") {
                let fault = try BinaryTokenFile.fault(text)
                rules.tokenFaults[fault.token] = fault.status
            }
        } catch {
            throw .usage(error.description, command: path)
        }
        rules.shutdownAfter = try arguments.int("shutdown-after", command: path, in: 0...Int(Int32.max))
        rules.dropAfter = try arguments.int("drop-after", command: path, in: 1...Int(Int32.max))
        rules.framePayloadLimit = try arguments.int("payload-limit", command: path, in: 0...65535) ?? rules.framePayloadLimit
        rules.legacyPayloadLimit = try arguments.int("legacy-payload-limit", command: path, in: 0...65535) ?? rules.legacyPayloadLimit
        rules.maximumFrameTokenSize = try arguments.int("max-token-size", command: path, in: 32...65535) ?? rules.maximumFrameTokenSize
        rules.maximumTopicSize = try arguments.int("max-topic-size", command: path, in: 0...65535) ?? rules.maximumTopicSize
        rules.requireTopic = !arguments.flag("allow-missing-topic")
        if let status = try arguments.int("protocol-error-status", command: path, in: 1...255) {
            rules.protocolErrorStatus = APNsBinaryStatus(rawValue: UInt8(status))
        }
        let host = arguments.value("host") ?? "127.0.0.1"
        var configuration = APNsBinarySimulator.Configuration(
            host: host, port: try arguments.int("port", command: path, in: 0...65535) ?? 2195, tls: tls, rules: rules)
        configuration.logger = logger.labeled("simulate.apns-binary")
        configuration.retainLimit = 1000  // the process only logs and records; keep memory flat
        let record = try openRecord(arguments, command: path)
        configuration.record = record

        var feedback: FeedbackSimulator? = nil
        if let feedbackPort = try arguments.int("feedback-port", command: path, in: 0...65535) {
            var f = FeedbackSimulator.Configuration(host: host, port: feedbackPort, tls: tls)
            f.deadTokens = try deadTokens(arguments, command: path)
            f.record = record
            f.logger = logger.labeled("simulate.feedback")
            feedback = FeedbackSimulator(configuration: f)
        } else if arguments.value("dead-tokens") != nil || arguments.value("uninstalled-tokens") != nil {
            throw .usage("--dead-tokens and --uninstalled-tokens need --feedback-port (or run 'herald simulate feedback')", command: path)
        }
        if let file = arguments.value("uninstalled-tokens") {
            do { configuration.uninstalledTokens = Set(try BinaryTokenFile.tokens(path: file)) } catch { throw .usage(error.description, command: path) }
        }
        configuration.feedback = feedback

        let gateway = APNsBinarySimulator(configuration: configuration)
        TerminationSignal.install()
        do {
            try gateway.start()
            try feedback?.start()
        } catch {
            gateway.stop()
            throw .runtime(error.description)
        }
        context.console.out("listening on \(display(host)):\(gateway.port)")
        if let feedback { context.console.out("feedback listening on \(display(host)):\(feedback.port)") }
        await TerminationSignal.waitAsync()
        logger.info("stopping")
        gateway.stop()
        feedback?.stop()
        record?.close()
    }

    private static func runFeedback(_ arguments: ParsedArguments, _ context: CommandContext) async throws(CLIError) {
        let path = "simulate feedback"
        let logger = makeLogger(arguments)
        let host = arguments.value("host") ?? "127.0.0.1"
        var configuration = FeedbackSimulator.Configuration(
            host: host, port: try arguments.int("port", command: path, in: 0...65535) ?? 2196,
            tls: try tlsFiles(arguments, command: path))
        configuration.deadTokens = try deadTokens(arguments, command: path)
        configuration.logger = logger.labeled("simulate.feedback")
        let record = try openRecord(arguments, command: path)
        configuration.record = record
        let service = FeedbackSimulator(configuration: configuration)
        TerminationSignal.install()
        do { try service.start() } catch { throw .runtime(error.description) }
        context.console.out("listening on \(display(host)):\(service.port)")
        await TerminationSignal.waitAsync()
        logger.info("stopping")
        service.stop()
        record?.close()
    }

    // MARK: Helpers

    private static func makeLogger(_ arguments: ParsedArguments) -> Logger {
        Logger(label: "simulate", level: arguments.flag("verbose") ? .debug : .info,
               handler: StreamLogHandler.standardError(format: .logfmt))
    }

    private static func display(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

    private static func tlsFiles(_ arguments: ParsedArguments, command: String) throws(CLIError) -> APNsBinaryTLSFiles? {
        let given = ["tls-cert", "tls-key", "client-ca"].filter { arguments.value($0) != nil }
        if arguments.flag("plaintext") {
            guard given.isEmpty else { throw .usage("--plaintext cannot be combined with --\(given[0])", command: command) }
            return nil
        }
        let files = try arguments.readableFiles(["tls-cert", "tls-key", "client-ca"], command: command)
        return APNsBinaryTLSFiles(certificateFile: files[0], keyFile: files[1], clientCAFile: files[2])
    }

    private static func deadTokens(_ arguments: ParsedArguments, command: String) throws(CLIError) -> [FeedbackSimulator.Entry] {
        guard let file = arguments.value("dead-tokens") else { return [] }
        do { return try BinaryTokenFile.deadTokens(path: file) } catch { throw .usage(error.description, command: command) }
    }

    private static func openRecord(_ arguments: ParsedArguments, command: String) throws(CLIError) -> BinaryRecordSink? {
        guard let file = arguments.value("record") else { return nil }
        do { return try BinaryRecordSink(path: file) } catch { throw .usage("--record: \(error.description)", command: command) }
    }
}
