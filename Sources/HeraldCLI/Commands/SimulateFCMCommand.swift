import FoundationEssentials
import HeraldCore
import HeraldSimulator
#if canImport(Glibc)
import Glibc
#endif

/// `herald simulate fcm`: run the FCM HTTP v1 simulator (token endpoint + messages:send) until SIGTERM/SIGINT.
enum SimulateFCMCommand {
    static let path = "simulate fcm"

    static let spec = CommandSpec(
        path: path,
        summary: "Run Google's OAuth token endpoint and the FCM HTTP v1 API on loopback, answering as Google does.",
        usage: "simulate fcm (--tls-cert PEM --tls-key PEM | --h2c) (--service-account-out FILE | --service-account FILE) [options]",
        options: [
            .value("host", "ADDR", "address to listen on (default 127.0.0.1)"),
            .value("port", "N", "port to listen on; 0 picks a free one (default 0)"),
            .value("tls-cert", "PEM", "server certificate chain"),
            .value("tls-key", "PEM", "server private key"),
            .flag("h2c", "serve cleartext HTTP/2 with prior knowledge instead of TLS (debugging only)"),
            .value("project", "ID", "project of the accounts written by --service-account-out (default herald-sim)"),
            .value("service-account-out", "FILE", "write a new service account (fresh RSA key, token_uri pointing here) to FILE, mode 0600"),
            .value("service-account", "FILE", "accept assertions of an existing service-account JSON file", repeatable: true),
            .value("token-lifetime", "SECONDS", "lifetime of the access tokens issued (default 3599)"),
            .flag("expires-in-string", "write expires_in as a string (\"3599\") instead of a number"),
            .value("unregistered", "TOKEN", "fault: answer this token 404 UNREGISTERED", repeatable: true),
            .value("invalid-token", "TOKEN", "fault: answer this token 400 INVALID_ARGUMENT (not a valid FCM registration token)", repeatable: true),
            .value("sender-mismatch", "TOKEN", "fault: answer this token 403 SENDER_ID_MISMATCH", repeatable: true),
            .value("third-party-auth-error", "TOKEN", "fault: answer this token 401 THIRD_PARTY_AUTH_ERROR", repeatable: true),
            .value("no-answer", "TOKEN", "fault: never answer sends to this token (the stream stays open)", repeatable: true),
            .value("unauthenticated", "N", "fault: answer the next N sends 401 UNAUTHENTICATED whatever their access token"),
            .value("quota-exceeded", "N", "fault: answer the next N valid sends 429 QUOTA_EXCEEDED"),
            .value("quota-retry-after", "SECONDS", "Retry-After on the 429s (default: none)"),
            .value("internal-errors", "N", "fault: then answer the next N valid sends 500 INTERNAL"),
            .value("unavailable", "N", "fault: then answer the next N valid sends 503 UNAVAILABLE"),
            .value("retry-after", "SECONDS", "Retry-After on the 500s and 503s (default: none)"),
            .value("latency-ms", "MS", "fault: delay every send's answer by MS milliseconds"),
            .flag("invalid-grant", "fault: answer every token request 400 invalid_grant"),
            .value("token-unavailable", "N", "fault: answer the next N token requests 503"),
            .value("record", "FILE", "append every accepted send to FILE as JSON Lines"),
            .flag("verbose", "log connection events and refused token requests to stderr"),
        ],
        discussion: """
        Prints "listening on HOST:PORT" as its first line (after writing --service-account-out),
        then runs until SIGTERM or SIGINT and prints a summary of what it saw.

        POST /token takes grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer with an RS256
        assertion: signature by the account's key (kid = private_key_id), iss = client_email,
        aud = https://HOST:PORT/token, scope firebase.messaging, exp - iat at most 3600 s.
        POST /v1/projects/PROJECT/messages:send checks the bearer token, the project, known
        fields only, exactly one of token/topic/condition, string-only data, reserved data keys
        (from, message_type, google*, gcm*), Duration syntax ("3.5s"), enum values and the
        4096-byte message limit, and answers {"name": "projects/PROJECT/messages/…"} or Google's
        error JSON with an FcmError detail. validate_only is checked, answered, not delivered.

        Faults apply to sends that pass those checks: --unauthenticated first, then the token
        faults, then --quota-exceeded, --internal-errors and --unavailable (counted over all
        connections).
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let (configuration, out) = try makeConfiguration(arguments)
        let simulator: FCMSimulator
        do throws(FCMSimulatorError) {
            simulator = try FCMSimulator(configuration: configuration)
            try simulator.start()
            if let out { try simulator.writeServiceAccount(to: out) }
        } catch {
            throw .runtime(error.description)
        }
        TerminationSignal.install()
        context.console.out("listening on \(configuration.host):\(simulator.port)")
        await TerminationSignal.waitAsync()
        simulator.stop()
        context.console.out(simulator.summary)
    }

    static func makeConfiguration(_ arguments: ParsedArguments) throws(CLIError) -> (FCMSimulator.Configuration, String?) {
        var tls: SimulatorHTTP2Server.Configuration.TLS? = nil
        if arguments.flag("h2c") {
            if arguments.value("tls-cert") != nil || arguments.value("tls-key") != nil {
                throw .usage("--h2c serves cleartext; drop --tls-cert/--tls-key or --h2c", command: path)
            }
        } else {
            let files = try arguments.readableFiles(["tls-cert", "tls-key"], command: path)
            tls = .init(certificateFile: files[0], keyFile: files[1])
        }
        var c = FCMSimulator.Configuration(tls: tls)
        c.host = arguments.value("host") ?? "127.0.0.1"
        c.port = try arguments.int("port", command: path, in: 0...65535) ?? 0
        if let project = arguments.value("project") {
            guard !project.isEmpty, project.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
                throw .usage("--project: expected a project id such as \"my-app-1234\", found \"\(project)\"", command: path)
            }
            c.projectID = project
        }
        let out = arguments.value("service-account-out")
        for file in arguments.all("service-account") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw .usage("--service-account: cannot read \"\(file)\"", command: path)
            }
            do throws(FCMSimulatorError) {
                c.accounts.append(try FCMServiceAccount.read(json: text, source: file))
            } catch {
                throw .usage("--service-account: \(error.description)", command: path)
            }
        }
        if out == nil && c.accounts.isEmpty {
            throw .usage("give --service-account-out FILE (a new account) or --service-account FILE (an existing one)", command: path)
        }
        if let s = try arguments.int("token-lifetime", command: path, in: 1...86_400) { c.accessTokenLifetime = TimeInterval(s) }
        c.expiresInAsString = arguments.flag("expires-in-string")
        c.recordFile = arguments.value("record")
        c.retainsMessages = false
        if arguments.flag("verbose") {
            c.logger = Logger(label: "simulator.fcm", level: .debug, handler: StreamLogHandler.standardError(format: .logfmt))
        }
        var f = FCMFaults()
        f.unregisteredTokens = Set(arguments.all("unregistered"))
        f.invalidTokens = Set(arguments.all("invalid-token"))
        f.senderMismatchTokens = Set(arguments.all("sender-mismatch"))
        f.thirdPartyAuthErrorTokens = Set(arguments.all("third-party-auth-error"))
        f.unansweredTokens = Set(arguments.all("no-answer"))
        f.unauthenticatedSends = try arguments.int("unauthenticated", command: path, in: 0...Int.max) ?? 0
        f.quotaExceeded = try arguments.int("quota-exceeded", command: path, in: 0...Int.max) ?? 0
        f.quotaRetryAfter = try arguments.int("quota-retry-after", command: path, in: 0...86_400)
        f.internalErrors = try arguments.int("internal-errors", command: path, in: 0...Int.max) ?? 0
        f.unavailable = try arguments.int("unavailable", command: path, in: 0...Int.max) ?? 0
        f.serverErrorRetryAfter = try arguments.int("retry-after", command: path, in: 0...86_400)
        f.latency = Double(try arguments.int("latency-ms", command: path, in: 0...600_000) ?? 0) / 1000
        f.invalidGrant = arguments.flag("invalid-grant")
        f.tokenEndpointUnavailable = try arguments.int("token-unavailable", command: path, in: 0...Int.max) ?? 0
        c.faults = f
        return (c, out)
    }
}
