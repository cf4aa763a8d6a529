import FoundationEssentials
import Glibc
import HeraldCore
import HeraldEvents

/// `herald webhooks test`: POST a signed `ping` event to one configured webhook.
enum WebhooksCommand {
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
