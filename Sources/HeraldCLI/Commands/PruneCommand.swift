import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// `herald prune`: delete devices that APNs reported dead long ago.
enum PruneCommand {
    static let command = HeraldCLI.Command(spec: CommandSpec(
        path: "prune",
        summary: "Delete devices invalidated more than N days ago.",
        usage: "prune [--older-than DAYS] [--config PATH]",
        options: [
            CommandSpec.configOption,
            .value("older-than", "DAYS", "age of the invalidation, in days (default 30)"),
        ])) { arguments, context throws(CLIError) in
        let configuration = try context.loadConfiguration(arguments)
        let days = try arguments.int("older-than", command: "prune", in: 0...36500) ?? 30
        let store = try await context.openStore(configuration)
        let cutoff = Date().addingTimeInterval(-Double(days) * 86400)
        do {
            let n = try await store.prune(invalidatedBefore: cutoff)
            context.console.out("pruned \(n) device\(n == 1 ? "" : "s") invalidated before \(cutoff.iso8601)")
        } catch {
            throw .runtime("cannot prune: \(error)")
        }
    }
}
