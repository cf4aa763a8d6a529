import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// `herald devices add | list | remove`: the token store by hand.
enum DevicesCommands {
    static let add = HeraldCLI.Command(spec: CommandSpec(
        path: "devices add",
        summary: "Register a device (or move/update a known token); past the app's maxRegisteredDevicesPerUser, the user's least recently registered device is removed.",
        usage: "devices add --app APP --user USER --token TOKEN [--transport NAME | --vendor NAME | --platform ios|android|web] [--environment sandbox|production] [--json]",
        options: [
            CommandSpec.configOption,
            .value("app", "APP", "app id (a key of \"apps\" in the config)"),
            .value("user", "USER", "the user who owns the device"),
            .value("token", "TOKEN", "the device's address as its route takes it (APNs: hex; spaces and <> as printed by NSData are removed)"),
            .value("transport", "NAME", "transport to use (default: the app's first route of --platform, else the first that takes the token)"),
            .value("platform", "PLATFORM", "ios, android or web: the app's first route of that platform that takes the token"),
            .value("vendor", "NAME", "huawei, xiaomi, oppo, vivo or fcm: the app's first route of that plugin (an Android phone's own channel)"),
            .value("environment", "ENV", "APNs: sandbox or production (default: the route's)"),
            .flag("json", "print the device as JSON"),
        ])) { arguments, context throws(CLIError) in
        let command = "devices add"
        let configuration = try context.loadConfiguration(arguments)
        let app = try context.app(try arguments.required("app", command: command), in: configuration, command: command)
        let user = try arguments.required("user", command: command)
        if let problem = FieldLimits.userProblem(user) { throw .usage("--user: \(problem)", command: command) }
        let rawToken = try arguments.required("token", command: command)
        var attributes = DeviceAttributes()
        attributes["environment"] = arguments.value("environment")
        let route: (transport: String, address: DeviceAddress)
        do throws(AddressProblem) {
            route = try configuration.registrationRoute(app: app, input: .token(rawToken), attributes: attributes,
                                                        transport: arguments.value("transport"),
                                                        platform: arguments.value("platform").map { Platform($0) },
                                                        vendor: arguments.value("vendor"))
        } catch {
            throw .usage("--\(error.field): \(error.message)", command: command)
        }
        let store = try await context.openStore(configuration)
        let result: RegistrationResult
        do {
            result = try await store.register(DeviceRegistration(app: app.id, token: route.address.token, user: user, transport: route.transport,
                                                                 attributes: route.address.attributes, maxPerUser: app.maxRegisteredDevicesPerUser),
                                              at: Date())
        } catch {
            throw .runtime("cannot register the device: \(error)")
        }
        if arguments.flag("json") {
            var w = JSONWriter()
            w.object { o in
                o.string("change", result.change.rawValue)
                o.string("previous_user", result.previousUser)
                o.object("device") { result.device.writeJSON(into: &$0) }
                o.stringArray("removed", result.removed)
            }
            context.console.out(w.string)
        } else {
            let d = result.device
            var line = "\(result.change.rawValue) device \(Redact.token(d.token)) for user \(d.user) (app \(d.app), transport \(d.transport)\(d.attributes.isEmpty ? "" : ", \(d.attributes.values.keys.sorted().map { d.attributes[$0]! }.joined(separator: ", "))"))"
            if let previous = result.previousUser { line += "; moved from user \(previous)" }
            context.console.out(line)
            for token in result.removed {
                context.console.out("removed device \(Redact.token(token)) of user \(d.user): the least recently registered past maxRegisteredDevicesPerUser (\(app.maxRegisteredDevicesPerUser))")
            }
        }
    }

    static let list = HeraldCLI.Command(spec: CommandSpec(
        path: "devices list",
        summary: "List devices, including invalidated ones with time and reason.",
        usage: "devices list [--app APP] [--user USER] [--limit N] [--json]",
        options: [
            CommandSpec.configOption,
            .value("app", "APP", "only this app"),
            .value("user", "USER", "only this user"),
            .value("limit", "N", "at most N devices"),
            .flag("json", "one JSON object per device per line"),
        ])) { arguments, context throws(CLIError) in
        let command = "devices list"
        let configuration = try context.loadConfiguration(arguments)
        if let a = arguments.value("app") { _ = try context.app(a, in: configuration, command: command) }
        if let user = arguments.value("user"), let problem = FieldLimits.userProblem(user) {
            throw .usage("--user: \(problem)", command: command)
        }
        let limit = try arguments.int("limit", command: command, in: 1...10_000_000)
        let store = try await context.openStore(configuration)
        let devices: [Device]
        do {
            devices = try await store.listDevices(app: arguments.value("app"), user: arguments.value("user"), limit: limit)
        } catch {
            throw .runtime("cannot list devices: \(error)")
        }
        let console = context.console
        if arguments.flag("json") {
            for d in devices {
                var w = JSONWriter()
                w.object { d.writeJSON(into: &$0) }
                console.out(w.string)
            }
            return
        }
        if devices.isEmpty { console.err("no devices"); return }
        // Cells escaped before the columns are measured (the console escapes every line anyway).
        let rows = [["APP", "USER", "TOKEN", "TRANSPORT", "ENVIRONMENT", "UPDATED", "STATUS"]] + devices.map { d in
            [d.app, d.user, d.token, d.transport, d.attributes["environment"] ?? "-", d.updatedAt.iso8601,
             d.invalidatedAt.map { "invalid since \($0.iso8601): \(d.invalidationReason ?? "")" } ?? "active"].map(TerminalText.escaped)
        }
        let widths = (0..<7).map { c in rows.map { $0[c].count }.max()! }
        for row in rows {
            console.out(row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
            }.joined(separator: "  "))
        }
    }

    static let remove = HeraldCLI.Command(spec: CommandSpec(
        path: "devices remove",
        summary: "Remove a device.",
        usage: "devices remove --app APP --token HEX",
        options: [
            CommandSpec.configOption,
            .value("app", "APP", "app id"),
            .value("token", "HEX", "device token"),
        ])) { arguments, context throws(CLIError) in
        let command = "devices remove"
        let configuration = try context.loadConfiguration(arguments)
        let app = try context.app(try arguments.required("app", command: command), in: configuration, command: command)
        let token: String
        do { token = try DeviceToken.normalize(try arguments.required("token", command: command)) } catch let e as CLIError {
            throw e
        } catch {
            throw .usage("--token: \(error)", command: command)
        }
        let store = try await context.openStore(configuration)
        let removed: Bool
        do { removed = try await store.unregister(app: app.id, token: token) } catch {
            throw .runtime("cannot remove the device: \(error)")
        }
        guard removed else { throw .runtime("no device \(Redact.token(token)) in app \(app.id)") }
        context.console.out("removed device \(Redact.token(token)) from app \(app.id)")
    }
}
