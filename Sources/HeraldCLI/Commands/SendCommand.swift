import Dispatch
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// `herald send`: fan a notification out in-process and report per device.
enum SendCommand {
    static let spec = CommandSpec(
        path: "send",
        summary: "Send a notification to users and/or device tokens, in-process; report per device.",
        usage: "send --app APP (--user U ... | --token T ... | --tokens-file F) [--alert TEXT | --title T --body B] [options]",
        options: [
            CommandSpec.configOption,
            .value("app", "APP", "app id (a key of \"apps\")"),
            .value("user", "USER", "a user; every active device of theirs is notified", repeatable: true),
            .value("token", "HEX", "a device token", repeatable: true),
            .value("tokens-file", "FILE", "one hex token per line (blank lines and # comments skipped): the bulk path"),
            .value("environment", "ENV", "sandbox or production, for tokens Herald does not know"),
            .value("alert", "TEXT", "alert as a plain string"),
            .value("title", "TEXT", "alert title"),
            .value("subtitle", "TEXT", "alert subtitle"),
            .value("body", "TEXT", "alert body"),
            .value("sound", "NAME", "sound file name (\"default\" for the system sound)"),
            .value("badge", "N", "badge number (0 clears it)"),
            .value("data", "JSON", "custom keys beside \"aps\", as a JSON object"),
            .value("push-type", "TYPE", "apns-push-type: \(PushType.allCases.map(\.rawValue).joined(separator: ", "))"),
            .value("priority", "N", "apns-priority: 10, 5 or 1 (default 10; background pushes always go with 5)"),
            .value("expiration", "UNIX", "apns-expiration in seconds since 1970; 0 = now or never"),
            .value("collapse-id", "ID", "apns-collapse-id (at most 64 bytes)"),
            .value("thread-id", "ID", "aps.thread-id"),
            .value("category", "NAME", "aps.category"),
            .flag("content-available", "aps.content-available = 1 (a background update)"),
            .flag("mutable-content", "aps.mutable-content = 1 (runs the service extension)"),
            .value("interruption-level", "LEVEL", "passive, active, time-sensitive or critical"),
            .value("relevance-score", "X", "aps.relevance-score, 0 to 1"),
            .flag("dry-run", "plan the fan-out and print it; send nothing (FCM routes: FCM checks each message with validate_only)"),
            .flag("json", "one JSON object per device per line: token, user, transport, outcome, reason, attempts, apns_id"),
            .flag("verbose", "log at the configured level instead of warnings only"),
        ],
        discussion: """
        Outcomes: delivered, invalid_token (the token is marked invalid in the store), rejected,
        expired, failed. Exit code 0 when every device was delivered (--dry-run: when every
        token can be planned), 1 when any was not (each is still reported), 2 for a usage or
        input error (a --token that is not a device token included), 3 for a configuration error.
        Deliveries go through the daemon's delivery engine (same retries, expiry and timestamp
        rule). A transport whose credentials are refused pauses; its devices end failed with
        the reason. --tokens-file is streamed 5,000 tokens at a time in bounded memory (about
        60 MB for any size); a token repeated within 5,000 lines is sent once, further apart
        it is sent again (run `sort -u` first to be sure).
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let command = "send"
        let configuration = try context.loadConfiguration(arguments)
        let app = try context.app(try arguments.required("app", command: command), in: configuration, command: command)
        var tokens: [String] = []
        for raw in arguments.all("token") {
            // Input given on the command line is checked as `devices add` checks it (some route of the
            // app must take it, in its plugin's words): a usage error. The route normalises it when planned.
            do throws(AddressProblem) {
                _ = try configuration.registrationRoute(app: app, input: .token(raw), attributes: DeviceAttributes(), transport: nil, platform: nil)
                tokens.append(raw)
            } catch {
                throw .usage("--token: \(error.message)", command: command)
            }
        }
        let file = try arguments.value("tokens-file").map { (path: String) throws(CLIError) in try TokenFile(path: path) }
        let users = arguments.all("user")
        for user in users { if let problem = FieldLimits.userProblem(user) { throw .usage("--user: \(problem)", command: command) } }
        if users.isEmpty && tokens.isEmpty && file == nil {
            throw .usage("give at least one --user, --token or --tokens-file", command: command)
        }
        let content = try buildContent(arguments)
        var attributes = DeviceAttributes()
        if let e = arguments.value("environment") {
            guard APNsEnvironment(rawValue: e) != nil else {
                throw .usage("--environment: expected sandbox or production, found \"\(e)\"", command: command)
            }
            attributes[APNsEnvironment.attribute] = e
        }
        let request = NotificationRequest(app: app.id, users: users, tokens: tokens, content: content, attributes: attributes)

        let store = try await context.openStore(configuration)
        let logger = context.logger(configuration, verbose: arguments.flag("verbose"))
        let metrics = MetricsRegistry()
        let console = context.console
        let json = arguments.flag("json")

        if arguments.flag("dry-run") {
            var planned = request
            if let file { planned.tokens += file.flatMap { $0 } }
            let plan: DispatchPlan
            do { plan = try await FanOut(configuration: configuration, store: store).plan(planned) } catch {
                throw .runtime(String(describing: error))
            }
            for d in plan.deliveries {
                if json {
                    var w = JSONWriter()
                    w.object { o in
                        o.string("token", d.token); o.string("user", d.user); o.string("transport", d.transport)
                        o.string("message_id", d.messageID.lowercasedString)
                        if let environment = routeEnvironment(d, attributes: attributes, configuration) { o.string("environment", environment) }
                        if d.payload.headers[APNsRoute.Header.pushType] != nil {
                            // What APNs would get (the fields this output always had).
                            let options = APNsSendOptions(d.payload)
                            o.string("apns_topic", options.pushType.topic(forBundleID: d.topic))
                            o.string("push_type", options.pushType.rawValue); o.int("priority", options.priority)
                        }
                        if !d.payload.headers.isEmpty {
                            o.object("headers") { h in for k in d.payload.headers.keys.sorted() { h.string(k, d.payload.headers[k]!) } }
                        }
                        o.rawJSON("payload", d.payload.body)
                    }
                    console.out(w.string)
                } else {
                    console.out("would send to \(Redact.token(d.token)) user=\(d.user ?? "-") transport=\(d.transport) topic=\(d.topic)")
                }
            }
            for r in plan.reports { console.out(json ? r.jsonLine(legacyAPNsID: isAPNs(r.transport, configuration)) : "\(r.outcome.rawValue) \(r.token): \(r.reason ?? "")") }
            if !json {
                console.out("payload: \(String(decoding: APNsPayload.encode(content, notificationID: plan.notificationID), as: UTF8.self))")
                console.out("\(plan.deliveries.count) deliveries planned, \(plan.reports.count) refused, \(plan.skippedOverLimit) over the per-user limit, \(plan.duplicates) duplicates")
            }
            let refusedByFCM = try await SendValidateOnly.run(plan, configuration: configuration, context: context, logger: logger, json: json)
            if !plan.reports.isEmpty || refusedByFCM > 0 {
                throw .runtime("\(plan.reports.count + refusedByFCM) of \(plan.reports.count + plan.deliveries.count) devices would not be sent to (see above)")
            }
            return
        }

        let (started, unavailable) = await context.startTransports(app.routes, configuration: configuration,
                                                                    logger: logger, metrics: metrics)
        let dispatcher = Dispatcher(configuration: configuration, store: store, transports: started,
                                    unavailable: unavailable, logger: logger, metrics: metrics)
        if let file {
            let counts = try await sendBulk(request, file: file, dispatcher: dispatcher, started: started, json: json, console: console,
                                            stderrIsTerminal: context.console.stderrIsTerminal)
            try requireAllDelivered(counts)
            return
        }
        let plan: DispatchPlan
        do { plan = try await dispatcher.plan(request) } catch {
            for t in started.values { await t.shutdown() }
            throw .runtime(String(describing: error))
        }
        // Each route judged the content for its own devices; when none can take it, say why as a
        // usage error (nothing was sent), else the refused devices are reported one by one.
        if plan.deliveries.isEmpty, let first = plan.refusals.first {
            for t in started.values { await t.shutdown() }
            throw .usage(cliField(.invalidRequest(field: first.problem.field, message: plan.refusals.map(\.description).joined(separator: "; "))),
                         command: command)
        }
        let total = plan.deliveries.count + plan.reports.count
        let progress = (!json && context.console.stderrIsTerminal && total > 1) ? ProgressBar(total: total, console: console) : nil
        let start = Date()
        let reports = await dispatcher.execute(plan) { report in
            if json { console.out(report.jsonLine(legacyAPNsID: isAPNs(report.transport, configuration))) }
            progress?.advance(outcome: report.outcome.rawValue)
        }
        for t in started.values { await t.shutdown() }

        if !json {
            let detailed = reports.count <= 50
            for r in reports where detailed || r.outcome != .delivered { console.out(line(r)) }
            var counts: [DeliveryState: Int] = [:]
            for r in reports { counts[r.outcome, default: 0] += 1 }
            console.out(tally(counts, seconds: Date().timeIntervalSince(start)))
            if plan.skippedOverLimit > 0 { console.out("\(plan.skippedOverLimit) devices skipped: over maxDevicesPerUser (\(app.maxDevicesPerUser))") }
        }
        var counts: [DeliveryState: Int] = [:]
        for r in reports { counts[r.outcome, default: 0] += 1 }
        try requireAllDelivered(counts)
    }

    /// Exit 1 (``CLIError/runtime(_:)``) unless every device was delivered, naming how many were not.
    static func requireAllDelivered(_ counts: [DeliveryState: Int]) throws(CLIError) {
        let total = counts.values.reduce(0, +)
        let notDelivered = total - counts[.delivered, default: 0]
        guard notDelivered > 0 else { return }
        let parts = DeliveryState.finalStates.filter { $0 != .delivered }.compactMap { o in counts[o].map { "\($0) \(o.rawValue)" } }
        throw .runtime("\(notDelivered) of \(total) device\(total == 1 ? "" : "s") not delivered (\(parts.joined(separator: ", ")))")
    }

    /// `--tokens-file`: the file is read and sent in chunks, each device forgotten once its
    /// outcome is printed, so memory stays bounded whatever the number of tokens.
    static func sendBulk(_ request: NotificationRequest, file: TokenFile, dispatcher: Dispatcher, started: [String: any Transport],
                         json: Bool, console: Console, stderrIsTerminal: Bool) async throws(CLIError) -> [DeliveryState: Int] {
        let total = (!json && stderrIsTerminal) ? file.count() + request.tokens.count : 0
        let progress = total > 1 ? ProgressBar(total: total, console: console) : nil
        let start = Date()
        let counts: [DeliveryState: Int]
        do {
            counts = try await dispatcher.sendBulk(request, chunks: file) { report in
                if json { console.out(report.jsonLine(legacyAPNsID: isAPNs(report.transport, dispatcher.configuration))) } else if report.outcome != .delivered { console.out(line(report)) }
                progress?.advance(outcome: report.outcome.rawValue)
            }
        } catch {
            for t in started.values { await t.shutdown() }
            throw .runtime(String(describing: error))
        }
        for t in started.values { await t.shutdown() }
        if !json { console.out(tally(counts, seconds: Date().timeIntervalSince(start))) }
        return counts
    }

    /// One device's outcome for the terminal.
    static func line(_ r: DeliveryReport) -> String {
        var line = "\(r.outcome.rawValue + String(repeating: " ", count: max(0, 13 - r.outcome.rawValue.count))) \(Redact.token(r.token))"
        if let u = r.user { line += " user=\(u)" }
        if let t = r.transport { line += " transport=\(t)" }
        if let reason = r.reason { line += " reason=\"\(reason)\"" }
        return line
    }

    /// `N devices: 3 delivered, 1 rejected in 0.12 s`.
    static func tally(_ counts: [DeliveryState: Int], seconds: Double) -> String {
        let n = counts.values.reduce(0, +)
        let parts = DeliveryState.finalStates.compactMap { o in counts[o].map { "\($0) \(o.rawValue)" } }
        return "\(n) device\(n == 1 ? "" : "s"): \(parts.isEmpty ? "none" : parts.joined(separator: ", ")) in \(seconds.fixed(2)) s"
    }

    static func cliField(_ error: DispatchError) -> String {
        guard case .invalidRequest(let field, let message) = error else { return error.description }
        let option: String
        switch field {
        case "apns.priority": option = "--priority"
        case "apns.collapse_id": option = "--collapse-id"
        case "apns.relevance_score": option = "--relevance-score"
        case "apns.expiration": option = "--expiration"
        case "data.aps": option = "--data"
        case "badge": option = "--badge"
        default: option = field
        }
        return "\(option): \(message)"
    }

    /// The notification content from the options.
    static func buildContent(_ a: ParsedArguments) throws(CLIError) -> NotificationContent {
        let command = "send"
        var content = NotificationContent()
        if let text = a.value("alert") {
            if a.value("title") != nil || a.value("body") != nil || a.value("subtitle") != nil {
                throw .usage("--alert cannot be combined with --title/--subtitle/--body", command: command)
            }
            content.alert = .text(text)
        } else if a.value("title") != nil || a.value("body") != nil || a.value("subtitle") != nil {
            content.alert = .fields(Alert(title: a.value("title"), subtitle: a.value("subtitle"), body: a.value("body")))
        }
        content.sound = a.value("sound").map { .named($0) }
        content.badge = try a.int("badge", command: command, in: 0...Int(Int32.max))
        if let data = a.value("data") {
            let value: JSONValue
            do { value = try JSONValue.parse(data) } catch {
                throw .usage("--data: \(error.message)", command: command)
            }
            guard case .object(let members) = value else {
                throw .usage("--data: expected a JSON object, found \(value.typeDescription)", command: command)
            }
            content.data = members
        }
        // The apns override block, built whole and set once (its typed view drops what it cannot read).
        var apns = APNsOptions()
        if let t = a.value("push-type") {
            guard let type = PushType(rawValue: t) else {
                throw .usage("--push-type: unknown \"\(t)\"; expected one of: \(PushType.allCases.map(\.rawValue).joined(separator: ", "))", command: command)
            }
            apns.pushType = type
        }
        apns.priority = try a.int("priority", command: command)
        if let e = a.value("expiration") {
            guard let v = Int64(e), v >= 0 else { throw .usage("--expiration: expected seconds since 1970 (or 0), found \"\(e)\"", command: command) }
            apns.expiration = v
        }
        apns.collapseID = a.value("collapse-id")
        apns.threadID = a.value("thread-id")
        apns.category = a.value("category")
        apns.contentAvailable = a.flag("content-available")
        apns.mutableContent = a.flag("mutable-content")
        if let l = a.value("interruption-level") {
            guard let level = InterruptionLevel(rawValue: l) else {
                throw .usage("--interruption-level: expected one of: \(InterruptionLevel.allCases.map(\.rawValue).joined(separator: ", "))", command: command)
            }
            apns.interruptionLevel = level
        }
        if let r = a.value("relevance-score") {
            guard let score = Double(r) else { throw .usage("--relevance-score: expected a number from 0 to 1", command: command) }
            apns.relevanceScore = score
        }
        content.apns = apns
        if content.isEmpty {
            throw .usage("nothing to send: give --alert, --title/--body, --badge, --sound, --content-available, --data or --push-type widgets", command: command)
        }
        return content
    }

    /// The APNs environment a delivery's route would send it to (the route's own device
    /// attribute, as it normalises the token), `nil` for a route that has none.
    static func routeEnvironment(_ d: Delivery, attributes: DeviceAttributes, _ configuration: HeraldConfiguration) -> String? {
        guard let route = configuration.transports[d.transport]?.configuration,
              let address = try? route.address(.token(d.token), attributes: attributes) else { return nil }
        return address.attributes[APNsEnvironment.attribute]
    }

    /// Whether `transport` renders APNs payloads (its reports keep the deprecated `apns_id`).
    static func isAPNs(_ transport: String?, _ configuration: HeraldConfiguration) -> Bool {
        transport.flatMap { configuration.transports[$0]?.reads(APNsOptions.block) } ?? false
    }
}
