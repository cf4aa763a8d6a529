import FoundationEssentials
import HeraldAPNs
import HeraldCore
import HeraldSimulator
#if canImport(Glibc)
import Glibc
#endif

/// `herald simulate apns-http2`: run the APNs HTTP/2 simulator until SIGTERM/SIGINT.
enum SimulateHTTP2Command {
    static let path = "simulate apns-http2"

    static let spec = CommandSpec(
        path: path,
        summary: "Run an APNs HTTP/2 provider API on loopback that answers as Apple documents.",
        usage: "simulate apns-http2 (--tls-cert PEM --tls-key PEM | --h2c) (--auth-key-pub KEYID=PEM --team TEAM | --client-ca PEM) [options]",
        options: [
            .value("host", "ADDR", "address to listen on (default 127.0.0.1)"),
            .value("port", "N", "port to listen on; 0 picks a free one (default 0)"),
            .value("tls-cert", "PEM", "server certificate chain"),
            .value("tls-key", "PEM", "server private key"),
            .flag("h2c", "serve cleartext HTTP/2 with prior knowledge instead of TLS (debugging only; without --auth-key-pub no authentication at all)"),
            .value("auth-key-pub", "KEYID=PEM", "token auth: a key id and its public key (PEM)", repeatable: true),
            .value("team", "TEAM", "token auth: the team the keys belong to (the JWT's iss)"),
            .value("client-ca", "PEM", "certificate auth: CA that client certificates must chain to"),
            .value("topic", "BUNDLE", "bundle id providers may push to (default: any with tokens; the client certificate's with certificates)", repeatable: true),
            .flag("production", "behave as production: no apns-unique-id on success (default: sandbox)"),
            .value("max-concurrent-streams", "N", "SETTINGS_MAX_CONCURRENT_STREAMS (default 1000)"),
            .flag("allow-streams-before-auth", "token auth: announce the full stream limit at once (Apple allows one stream until a valid token)"),
            .value("token-update-interval", "SECONDS", "shortest time between two new tokens on a connection (default 1200)"),
            .value("token-max-age", "SECONDS", "oldest iat accepted (default 3600)"),
            .value("unregistered", "FILE", "fault: tokens answered 410 Unregistered; lines \"TOKEN [TIMESTAMP_MS]\""),
            .value("expired-tokens", "FILE", "fault: tokens answered 410 ExpiredToken; lines as for --unregistered"),
            .value("bad-device-token", "HEX", "fault: answer this token 400 BadDeviceToken", repeatable: true),
            .value("not-for-topic", "HEX", "fault: answer this token 400 DeviceTokenNotForTopic", repeatable: true),
            .value("too-many-requests", "HEX", "fault: answer this token 429 TooManyRequests", repeatable: true),
            .value("reset-stream", "HEX", "fault: reset this token's streams (RST_STREAM INTERNAL_ERROR) instead of answering", repeatable: true),
            .value("no-answer", "HEX", "fault: never answer this token's requests (the stream stays open)", repeatable: true),
            .value("device-limit", "N", "fault: 429 TooManyRequests for every device after N accepted notifications"),
            .value("internal-server-errors", "N", "fault: answer the first N valid requests 500 InternalServerError"),
            .value("service-unavailable", "N", "fault: then answer the next N valid requests 503 ServiceUnavailable"),
            .value("throttle", "N", "fault: then answer the next N valid requests 429 TooManyRequests"),
            .value("goaway-after", "N", "fault: answer N requests on a connection, GOAWAY {\"reason\":\"Shutdown\"} (last stream: the Nth) going out just before the Nth answer, then close"),
            .value("close-after", "N", "fault: after N answers on a connection close the socket abruptly"),
            .value("latency-ms", "MS", "fault: delay every response by MS milliseconds"),
            .value("management-port", "N", "serve the channel management API (iOS 18 broadcast channels) on this port too; 0 picks a free one"),
            .value("channel-limit", "N", "channels allowed per bundle (default 10000, Apple's limit per environment)"),
            .value("record", "FILE", "append every accepted notification to FILE as JSON Lines"),
            .flag("verbose", "log connection events (TLS failures, protocol errors) to stderr"),
        ],
        discussion: """
        Prints "listening on HOST:PORT" as its first line, then runs until SIGTERM or SIGINT and
        prints a summary of what it saw.

        Requests are checked as APNs does: 405 MethodNotAllowed, 404 BadPath, 400 MissingDeviceToken,
        DuplicateHeaders, BadMessageId, InvalidPushType, MissingTopic, BadTopic (the topic must carry
        the push type's suffix: .voip, .complication, .pushkit.fileprovider, .location-query,
        .push-type.liveactivity, .voip-ptt, .push-type.widgets, .push-type.controls), TopicDisallowed,
        BadPriority (10, 5 or 1; never 10 for background), BadExpirationDate, BadCollapseId (> 64 bytes),
        BadDeviceToken, PayloadEmpty, 413 PayloadTooLarge (4096 bytes, 5120 for voip).
        Token auth: 403 MissingProviderToken, InvalidProviderToken, UnrelatedKeyIdInToken,
        ExpiredProviderToken (iat older than --token-max-age), 429 TooManyProviderTokenUpdates (a new
        token sooner than --token-update-interval after the last on the same connection).

        Live Activities (push type liveactivity) must keep Apple's payload rules: aps.event start,
        update or end; aps.timestamp; aps.content-state (optional on end); attributes-type,
        attributes and alert on start; dismissal-date, stale-date in whole seconds. Else 400
        BadLiveActivityPayload (the simulator's own reason: APNs accepts such a payload and the
        device discards it).

        Broadcasts (iOS 18): POST /4/broadcasts/apps/BUNDLE with apns-channel-id, apns-push-type
        liveactivity, apns-priority 10, 5 or 1, a payload of at most 5120 bytes that updates or
        ends an activity; answered with apns-request-id. 400 MissingPushType, InvalidPushType,
        MissingChannelId, BadChannelId, 404 ChannelNotRegistered.
        With --management-port, the channel management API: POST /1/apps/BUNDLE/channels
        {"message-storage-policy": 0|1, "push-type": "LiveActivity"} (201, apns-channel-id), GET and
        DELETE with apns-channel-id, GET /1/apps/BUNDLE/all-channels; 400 CannotCreateChannelConfig
        past --channel-limit channels per bundle.

        Faults apply to requests that pass those checks, in this order: --reset-stream, --no-answer,
        --unregistered and --expired-tokens (410 with "timestamp" in ms), --bad-device-token,
        --not-for-topic, --too-many-requests, --device-limit, then --internal-server-errors,
        --service-unavailable and --throttle (counted over all connections).
        --goaway-after, --close-after and --latency-ms act per connection.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let configuration = try makeConfiguration(arguments)
        let simulator: APNsHTTP2Simulator
        do throws(HTTP2SimulatorError) {
            simulator = try APNsHTTP2Simulator(configuration: configuration)
            try simulator.start()
        } catch {
            throw .runtime(error.description)
        }
        TerminationSignal.install()
        context.console.out("listening on \(configuration.host):\(simulator.port)")
        if configuration.managementPort != nil {
            context.console.out("channel management on \(configuration.host):\(simulator.managementPort)")
        }
        await TerminationSignal.waitAsync()
        simulator.stop()
        context.console.out(simulator.summary)
    }

    static func makeConfiguration(_ arguments: ParsedArguments) throws(CLIError) -> APNsHTTP2Simulator.Configuration {
        var tls: APNsHTTP2Simulator.TLS? = nil
        if arguments.flag("h2c") {
            if arguments.value("tls-cert") != nil || arguments.value("tls-key") != nil {
                throw .usage("--h2c serves cleartext; drop --tls-cert/--tls-key or --h2c", command: path)
            }
        } else {
            let files = try arguments.readableFiles(["tls-cert", "tls-key"], command: path)
            tls = APNsHTTP2Simulator.TLS(certificateFile: files[0], keyFile: files[1], clientCAFile: arguments.value("client-ca"))
        }

        let keySpecs = arguments.all("auth-key-pub")
        let authentication: APNsHTTP2Simulator.Authentication
        if !keySpecs.isEmpty {
            guard let team = arguments.value("team"), !team.isEmpty else {
                throw .usage("--auth-key-pub needs --team TEAM (the team id the JWTs carry as iss)", command: path)
            }
            if arguments.value("client-ca") != nil {
                throw .usage("choose token auth (--auth-key-pub) or certificate auth (--client-ca), not both", command: path)
            }
            var keys: [APNsHTTP2Simulator.TokenKey] = []
            for spec in keySpecs {
                guard let eq = spec.firstIndex(of: "="), eq != spec.startIndex, spec.index(after: eq) != spec.endIndex else {
                    throw .usage("--auth-key-pub: expected KEYID=PEM-FILE, found \"\(spec)\"", command: path)
                }
                keys.append(.init(keyID: String(spec[..<eq]), teamID: team, publicKeyFile: String(spec[spec.index(after: eq)...])))
            }
            authentication = .token(keys: keys)
        } else if arguments.value("client-ca") != nil {
            if arguments.flag("h2c") {
                throw .usage("--client-ca needs TLS (client certificates are checked in the handshake); drop --h2c", command: path)
            }
            authentication = .certificate
        } else if arguments.flag("h2c") {
            authentication = .certificate  // no TLS, so no client certificate: every request is authorised
        } else {
            throw .usage("choose an authentication: --auth-key-pub KEYID=PEM --team TEAM (tokens) or --client-ca PEM (certificates)",
                         command: path)
        }

        var c = APNsHTTP2Simulator.Configuration(tls: tls, authentication: authentication)
        c.host = arguments.value("host") ?? "127.0.0.1"
        c.port = try arguments.int("port", command: path, in: 0...65535) ?? 0
        c.topics = arguments.all("topic")
        c.environment = arguments.flag("production") ? .production : .sandbox
        c.maxConcurrentStreams = try arguments.int("max-concurrent-streams", command: path, in: 1...1_000_000) ?? 1000
        c.singleStreamUntilAuthenticated = !arguments.flag("allow-streams-before-auth")
        if let s = try arguments.int("token-update-interval", command: path, in: 0...86_400) { c.tokenUpdateInterval = TimeInterval(s) }
        if let s = try arguments.int("token-max-age", command: path, in: 1...31_536_000) { c.tokenMaxAge = TimeInterval(s) }
        c.managementPort = try arguments.int("management-port", command: path, in: 0...65535)
        if let n = try arguments.int("channel-limit", command: path, in: 0...1_000_000) { c.channelLimit = n }
        c.recordFile = arguments.value("record")
        c.retainsNotifications = false
        if arguments.flag("verbose") {
            c.logger = Logger(label: "simulator.apns-http2", level: .debug, handler: StreamLogHandler.standardError(format: .logfmt))
        }

        var faults = HTTP2Faults()
        if let file = arguments.value("unregistered") {
            do throws(HTTP2SimulatorError) {
                faults.unregistered = try HTTP2Faults.readUnregistered(file: file, defaultTime: Date())
            } catch {
                throw .usage("--unregistered: \(error.description)", command: path)
            }
        }
        if let file = arguments.value("expired-tokens") {
            do throws(HTTP2SimulatorError) {
                faults.expiredTokens = try HTTP2Faults.readUnregistered(file: file, defaultTime: Date())
            } catch {
                throw .usage("--expired-tokens: \(error.description)", command: path)
            }
        }
        func tokens(_ option: String) throws(CLIError) -> Set<String> {
            var result = Set<String>()
            for t in arguments.all(option) {
                guard !t.isEmpty, t.allSatisfy(\.isHexDigit) else {
                    throw .usage("--\(option): \"\(t)\" is not a hex device token", command: path)
                }
                result.insert(t.lowercased())
            }
            return result
        }
        faults.badDeviceTokens = try tokens("bad-device-token")
        faults.tokensNotForTopic = try tokens("not-for-topic")
        faults.tooManyRequests = try tokens("too-many-requests")
        faults.resetTokens = try tokens("reset-stream")
        faults.unansweredTokens = try tokens("no-answer")
        faults.requestsPerDeviceLimit = try arguments.int("device-limit", command: path, in: 0...Int.max)
        faults.internalServerErrors = try arguments.int("internal-server-errors", command: path, in: 0...Int.max) ?? 0
        faults.serviceUnavailable = try arguments.int("service-unavailable", command: path, in: 0...Int.max) ?? 0
        faults.throttledRequests = try arguments.int("throttle", command: path, in: 0...Int.max) ?? 0
        faults.goAwayAfterStreams = try arguments.int("goaway-after", command: path, in: 1...Int.max)
        faults.closeAfterStreams = try arguments.int("close-after", command: path, in: 1...Int.max)
        faults.latency = Double(try arguments.int("latency-ms", command: path, in: 0...600_000) ?? 0) / 1000
        c.faults = faults
        return c
    }
}
