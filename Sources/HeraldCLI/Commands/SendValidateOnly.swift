import FoundationEssentials
import HeraldCore

/// `herald send --dry-run` on FCM routes: FCM itself checks each planned message
/// (`validate_only`), and delivers none. Other routes are only planned.
enum SendValidateOnly {
    /// The `type` whose routes support `validate_only`, and the key that turns it on.
    static let kind = "fcm"
    static let key = "validateOnly"

    /// Sends the plan's deliveries on FCM routes with `validate_only`, prints each answer, and
    /// returns how many FCM refused (or could not check). Nothing touches the store.
    static func run(_ plan: DispatchPlan, configuration: HeraldConfiguration, context: CommandContext,
                    logger: Logger, json: Bool) async throws(CLIError) -> Int {
        let routes = Set(plan.deliveries.map(\.transport)).filter { configuration.transports[$0]?.kind == kind }
        guard !routes.isEmpty, let path = configuration.sourcePath else { return 0 }
        let checking = try reload(path: path, routes: routes, context: context)
        let (started, unavailable) = await context.startTransports(Array(routes), configuration: checking, logger: logger,
                                                                    metrics: MetricsRegistry())
        var refused = 0
        for route in routes.sorted() {
            let batch = plan.deliveries.filter { $0.transport == route }
            let outcomes: [DeliveryOutcome]
            if let transport = started[route] {
                outcomes = await transport.deliver(batch)
            } else {
                outcomes = batch.map { _ in .setupFailure(reason: unavailable[route] ?? "transport \(route) did not start") }
            }
            for (d, outcome) in zip(batch, outcomes) {
                let ok: Bool
                if case .delivered = outcome { ok = true } else { ok = false }
                if !ok { refused += 1 }
                if json {
                    var w = JSONWriter()
                    w.object { o in
                        o.string("token", d.token); o.string("transport", route); o.bool("validated", ok)
                        if let reason = outcome.reason { o.string("reason", reason) }
                    }
                    context.console.out(w.string)
                } else {
                    context.console.out(ok ? "FCM accepts \(Redact.token(d.token)) on \(route) (validate_only: not delivered)"
                                           : "FCM refuses \(Redact.token(d.token)) on \(route): \(outcome.reason ?? "")")
                }
            }
        }
        for t in started.values { await t.shutdown() }
        return refused
    }

    /// The configuration again, with `validateOnly` on `routes`.
    private static func reload(path: String, routes: Set<String>, context: CommandContext) throws(CLIError) -> HeraldConfiguration {
        guard let data = FileManager.default.contents(atPath: path), case .object(var root)? = try? JSONValue.parse(data),
              case .object(var transports)? = root["transports"] else {
            throw .configuration(["herald: cannot read \(path) again for --dry-run"])
        }
        for name in routes {
            if case .object(var section)? = transports[name] {
                section[key] = .bool(true)
                transports[name] = .object(section)
            }
        }
        root["transports"] = .object(transports)
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().standardizedFileURL.path
        do {
            var c = try HeraldConfiguration.parse(Data(JSONValue.object(root).jsonString.utf8), source: path, baseDirectory: directory,
                                                  registry: context.registry, environment: context.environment)
            c.sourcePath = path
            return c
        } catch {
            throw .configuration(CommandContext.configurationErrorLines(path: path, error))
        }
    }
}
