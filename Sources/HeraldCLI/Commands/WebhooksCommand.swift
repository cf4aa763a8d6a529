import FoundationEssentials
import Glibc
import HeraldCore
import HeraldEvents

/// `herald webhooks list` (each webhook's backlog) and `herald webhooks test` (a signed `ping`).
enum WebhooksCommand {
    static let list = HeraldCLI.Command(spec: CommandSpec(
        path: "webhooks list",
        summary: "Show each configured webhook and the events waiting for it.",
        usage: "webhooks list [--config PATH]",
        options: [CommandSpec.configOption],
        discussion: """
        One line per webhook: its id, URL and event types, then the events waiting for it (read
        from the database's outbox, beside a running daemon), the age of the oldest, and its
        cursor (the last event it acknowledged). "not started" until a daemon first sent to it.
        """)) { arguments, context throws(CLIError) in
        let configuration = try context.loadConfiguration(arguments)
        let webhooks = configuration.webhooks
        guard !webhooks.isEmpty else {
            context.console.out("no webhooks configured")
            return
        }
        let outbox: any EventOutbox
        do {
            guard let opened = try await context.storage.driver(for: configuration).openEventOutbox(configuration) else {
                throw CLIError.configuration(["storage.driver \(configuration.storage.driver) keeps no event outbox"])
            }
            outbox = opened
        } catch let e as CLIError {
            throw e
        } catch {
            throw .configuration(["cannot open the event outbox: \(error)"])
        }
        let now = Date()
        var failure: String?
        for w in webhooks {
            let head = "\(w.id)  \(w.url)  events=\(w.events.joined(separator: ","))\(w.apps.map { "  apps=\($0.joined(separator: ","))" } ?? "")"
            do {
                let b = try await WebhookBacklog.measure(w, in: outbox)
                guard let cursor = b.cursor else {
                    context.console.out("\(head)  not started")
                    continue
                }
                let age = b.oldest.map { "  oldest=\(Int(max(0, now.timeIntervalSince($0))))s" } ?? ""
                context.console.out("\(head)  pending=\(b.pending)\(b.truncated ? "+" : "")\(age)  cursor=\(cursor)")
            } catch {
                failure = "\(w.id): cannot read the outbox: \(error)"
                context.console.out("\(head)  unknown (\(error))")
            }
        }
        await outbox.close()
        if let failure { throw .runtime(failure) }
    }

    static let test = HeraldCLI.Command(spec: CommandSpec(
        path: "webhooks test",
        summary: "POST a signed ping event to a configured webhook and print its answer.",
        usage: "webhooks test --id ID [--config PATH]",
        options: [
            CommandSpec.configOption,
            .value("id", "ID", "the webhook's id (webhooks[].id)"),
        ],
        discussion: """
        Sends {"events": [{"type": "ping", ...}]} once, signed like every batch (Herald-Signature,
        one v1= per secret, and Herald-Webhook-Id). Exit 0 on a 2xx, 1 otherwise. Redirects are not followed.
        """)) { arguments, context throws(CLIError) in
        let command = "webhooks test"
        let configuration = try context.loadConfiguration(arguments)
        let id = try arguments.required("id", command: command)
        guard let webhook = configuration.webhooks.first(where: { $0.id == id }) else {
            let known = configuration.webhooks.map(\.id)
            throw .usage("--id: no webhook \"\(id.prefix(64))\"; configured: \(known.isEmpty ? "none" : known.joined(separator: ", "))", command: command)
        }
        let poster: WebhookPoster
        do {
            poster = try WebhookPoster(webhook: webhook, logger: context.logger(configuration, verbose: false), metrics: MetricsRegistry())
            try poster.start()
        } catch {
            throw .configuration(["\(error)"])
        }
        let ping = poster.ping()
        let attempt = await poster.post([ping])
        await poster.stop()
        switch attempt {
        case .accepted(let status):
            context.console.out("\(webhook.id): \(status), ping \(ping.id) accepted by \(webhook.url)")
        case .refused(let status, _):
            throw .runtime("\(webhook.id): \(webhook.url) answered \(status)\((300..<400).contains(status) ? " (a redirect: not followed)" : "")")
        case .failed(let reason):
            throw .runtime("\(webhook.id): no answer from \(webhook.url): \(reason)")
        }
    }
}
