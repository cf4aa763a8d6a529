import FoundationEssentials
import HeraldAPNs
import HeraldCore

/// `herald migrate`: bring the storage schema up to date (the daemon also does it on start).
enum MigrateCommand {
    static let command = HeraldCLI.Command(spec: CommandSpec(
        path: "migrate",
        summary: "Apply the storage schema (PostgreSQL: under an advisory lock; safe beside running nodes).",
        usage: "migrate [--config PATH]",
        options: [CommandSpec.configOption])) { arguments, context throws(CLIError) in
        let configuration = try context.loadConfiguration(arguments)
        do {
            let driver = try context.storage.driver(for: configuration)
            context.console.out("\(driver.name): \(try await driver.migrate(configuration))")
        } catch {
            throw .runtime("cannot migrate: \(error)")
        }
    }
}
