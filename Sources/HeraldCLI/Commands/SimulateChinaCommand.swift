import FoundationEssentials
import HeraldCore
import HeraldSimulator
#if canImport(Glibc)
import Glibc
#endif

/// `herald simulate hms | xiaomi | oppo | vivo`: run a China vendor's push API on loopback until SIGTERM/SIGINT.
enum SimulateChinaCommand {
    static let commands = ChinaVendor.allCases.map(command)

    static func spec(_ vendor: ChinaVendor) -> CommandSpec {
        let path = "simulate \(vendor.rawValue)"
        let (name, what): (String, String)
        switch vendor {
        case .hms:
            name = "Huawei Push Kit"
            what = """
                POST /oauth2/v3/token takes grant_type=client_credentials with client_id (--app-id) and
                client_secret (--app-secret) and answers {"access_token","expires_in","token_type"}.
                POST /v1/APP_ID/messages:send checks the bearer token, 1-1000 tokens, data as a string,
                a notification's title, body and click_action, the 4096-byte message and the ttl, and
                answers {"code":"80000000","msg":"Success","requestId"}, 80100000 with illegal_tokens,
                80300007, 80200003 (HTTP 401), 80300008, 80300010, 503 (flow control) or 81000001 (500).
                Give the hms transport endpoint https://HOST:PORT and authEndpoint
                https://HOST:PORT/oauth2/v3/token.
                """
        case .xiaomi:
            name = "Xiaomi push"
            what = """
                POST /v3/message/regid takes the form Xiaomi takes with Authorization: key=APP_SECRET
                (--app-secret-env) and checks restricted_package_name (--package), 1-1000
                registration ids, pass_through, a notification's title (at most 50 characters) and
                description (at most 128), payload (4 KB), time_to_live and notify_id. It answers
                {"result":"ok","code":0,"data":{"id","bad_regids"}} or an error code: 21301 (bad key),
                20301 (no valid registration id), 10017 (bad parameter), 22022 (package), 10027 (rate
                limit), 200001 (daily quota).
                """
        case .oppo:
            name = "OPPO push"
            what = """
                POST /server/v1/auth takes app_key (--app-key), timestamp (milliseconds) and sign (hex
                SHA-256 of app key, timestamp and master secret, --master-secret-env) and answers
                {"code":0,"data":{"auth_token","create_time"}}, or 14, 16, 19. POST
                /server/v1/message/notification/unicast (form message) and .../unicast_batch (form
                messages, up to 1000) check auth_token (11), target_type 2, title (50 characters),
                content (200), sub_title (10), off_line_ttl (10 days), action_parameters (4000 bytes)
                and notify_level, and answer {"code":0,"data":{"messageId"}}, a list of
                {"messageId","registrationId","errorCode"} (10000: invalid registration id), -2 (rate
                limit), 33 (daily quota) or -1 (HTTP 500).
                """
        case .vivo:
            name = "vivo push"
            what = """
                POST /message/auth takes {"appId","appKey","timestamp","sign"} (sign: lower-case hex
                MD5 of appId, appKey, timestamp and app secret) and answers {"result":0,"authToken"}, or
                10200, 10206, 10207. With the authToken header (10000 when expired): POST /message/send
                (one regId), /message/saveListPayload then /message/pushToList (2-1000 regIds and the
                taskId) check a unique requestId, title (40, a Chinese character counting 2), content
                (100), notifyType, skipType, classification and timeToLive, and answer
                {"result":0,"taskId"}, invalidUsers [{"status":1,"userid"}], 10302 (invalid regId),
                10252 (rate limit), 10070 (daily quota) or -1 (HTTP 500).
                """
        }
        return CommandSpec(
            path: path,
            summary: "Run \(name) on loopback, answering as the vendor does.",
            usage: "\(path) (--tls-cert PEM --tls-key PEM | --h2c) [options]",
            options: [
                .value("host", "ADDR", "address to listen on (default 127.0.0.1)"),
                .value("port", "N", "port to listen on; 0 picks a free one (default 0)"),
                .value("tls-cert", "PEM", "server certificate chain"),
                .value("tls-key", "PEM", "server private key"),
                .flag("h2c", "serve cleartext HTTP/2 with prior knowledge instead of TLS (debugging only)"),
                .value("app-id", "ID", "the app id accepted (HMS, vivo; default 10086000)"),
                .value("app-secret-env", "NAME", "read the app secret accepted from this environment variable (HMS, Xiaomi, vivo; default sim-app-secret)"),
                .value("app-key", "KEY", "the app key accepted (OPPO, vivo; default sim-app-key)"),
                .value("master-secret-env", "NAME", "read the master secret accepted from this environment variable (OPPO; default sim-master-secret)"),
                .value("package", "NAME", "the package name accepted (Xiaomi; default com.example.app)"),
                .value("token-lifetime", "SECONDS", "lifetime of the access tokens issued (default: HMS 3600, OPPO and vivo 86400)"),
                .value("invalid-token", "TOKEN", "fault: report this device token invalid", repeatable: true),
                .value("expired-tokens", "N", "fault: answer the next N sends as if their access token expired"),
                .flag("bad-credentials", "fault: refuse the app's credentials"),
                .value("rate-limited", "N", "fault: rate-limit the next N valid sends"),
                .value("daily-quota", "N", "fault: then answer the next N valid sends that the daily quota is used up"),
                .value("server-errors", "N", "fault: then answer the next N valid sends HTTP 500"),
                .value("latency-ms", "MS", "fault: delay every send's answer by MS milliseconds"),
                .value("record", "FILE", "append every accepted send to FILE as JSON Lines"),
                .flag("verbose", "log connection events to stderr"),
            ],
            discussion: """
                Prints "listening on HOST:PORT" as its first line, then runs until SIGTERM or SIGINT and
                prints a summary of what it saw. Secrets are read from environment variables, never
                from the command line.

                \(what)
                """)
    }

    static func command(_ vendor: ChinaVendor) -> HeraldCLI.Command {
        HeraldCLI.Command(spec: spec(vendor)) { arguments, context throws(CLIError) in
            let configuration = try makeConfiguration(arguments, vendor: vendor)
            let simulator: ChinaVendorSimulator
            do throws(ChinaVendorSimulatorError) {
                simulator = try ChinaVendorSimulator(configuration: configuration)
                try simulator.start()
            } catch {
                throw .runtime(error.description)
            }
            TerminationSignal.install()
            context.console.out("listening on \(configuration.host):\(simulator.port)")
            await TerminationSignal.waitAsync()
            simulator.stop()
            context.console.out(simulator.summary)
        }
    }

    static func makeConfiguration(_ arguments: ParsedArguments, vendor: ChinaVendor) throws(CLIError) -> ChinaVendorSimulator.Configuration {
        let path = "simulate \(vendor.rawValue)"
        var tls: SimulatorHTTP2Server.Configuration.TLS? = nil
        if arguments.flag("h2c") {
            if arguments.value("tls-cert") != nil || arguments.value("tls-key") != nil {
                throw .usage("--h2c serves cleartext; drop --tls-cert/--tls-key or --h2c", command: path)
            }
        } else {
            let files = try arguments.readableFiles(["tls-cert", "tls-key"], command: path)
            tls = .init(certificateFile: files[0], keyFile: files[1])
        }
        var c = ChinaVendorSimulator.Configuration(vendor: vendor, tls: tls)
        c.host = arguments.value("host") ?? "127.0.0.1"
        c.port = try arguments.int("port", command: path, in: 0...65535) ?? 0
        if let id = arguments.value("app-id") { c.credentials.appID = id }
        if let key = arguments.value("app-key") { c.credentials.appKey = key }
        if let package = arguments.value("package") { c.credentials.packageName = package }
        for (option, keyPath) in [("app-secret-env", \ChinaVendorCredentials.appSecret), ("master-secret-env", \ChinaVendorCredentials.masterSecret)] {
            guard let name = arguments.value(option) else { continue }
            guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
                throw .usage("--\(option): the environment variable \(name) is not set", command: path)
            }
            c.credentials[keyPath: keyPath] = value
        }
        if let s = try arguments.int("token-lifetime", command: path, in: 1...172_800) { c.accessTokenLifetime = TimeInterval(s) }
        c.recordFile = arguments.value("record")
        c.retainsMessages = false
        if arguments.flag("verbose") {
            c.logger = Logger(label: "simulator.\(vendor.rawValue)", level: .debug, handler: StreamLogHandler.standardError(format: .logfmt))
        }
        var f = ChinaVendorFaults()
        f.invalidTokens = Set(arguments.all("invalid-token"))
        f.expiredAccessTokens = try arguments.int("expired-tokens", command: path, in: 0...Int.max) ?? 0
        f.badCredentials = arguments.flag("bad-credentials")
        f.rateLimited = try arguments.int("rate-limited", command: path, in: 0...Int.max) ?? 0
        f.dailyQuota = try arguments.int("daily-quota", command: path, in: 0...Int.max) ?? 0
        f.serverErrors = try arguments.int("server-errors", command: path, in: 0...Int.max) ?? 0
        f.latency = Double(try arguments.int("latency-ms", command: path, in: 0...600_000) ?? 0) / 1000
        c.faults = f
        return c
    }
}
