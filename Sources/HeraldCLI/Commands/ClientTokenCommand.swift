import FoundationEssentials
import HeraldAPNs
import HeraldCore
import HeraldCrypto

/// `herald client-token`: mints a client token for one user's device, as an app backend would.
enum ClientTokenCommand {
    static let spec = CommandSpec(
        path: "client-token",
        summary: "Mint a client token (HS256 JWT) that lets a device open its live stream.",
        usage: "client-token --app APP --user USER --device ID [--ttl 1h] [--config PATH]",
        options: [
            CommandSpec.configOption,
            .value("app", "APP", "app id (a key of \"apps\" in the config; the app needs a clientSecret)"),
            .value("user", "USER", "the user the stream belongs to (claim sub)"),
            .value("device", "ID", "the device's APNs token, or an installation id in hex (e.g. a UUID's 32 hex digits)"),
            .value("ttl", "DURATION", "lifetime: 90s, 15m, 1h, 7d or seconds; at most 30d (default 1h)"),
        ],
        discussion: """
        Prints the token on one line. It is signed with the app's clientSecret and carries the
        claims sub, app, device, iat and exp; a client sends it to GET /v1/stream as
        "Authorization: Bearer <token>" or ?access_token=<token>. POST /v1/client-tokens does the same over the API.
        A device registered to another user is refused (exit 2), as the stream would refuse its token.
        """)

    static let command = HeraldCLI.Command(spec: spec) { arguments, context throws(CLIError) in
        let name = spec.path
        let configuration = try context.loadConfiguration(arguments)
        let app = try context.app(try arguments.required("app", command: name), in: configuration, command: name)
        let user = try arguments.required("user", command: name)
        let device = try arguments.required("device", command: name)
        var lifetime = ClientToken.defaultLifetime
        if let text = arguments.value("ttl") {
            guard let seconds = JSONNode.parseDuration(text), seconds.isFinite else {
                throw .usage("--ttl: expected a duration such as 90s, 15m, 1h or 7d, found \"\(text)\"", command: name)
            }
            lifetime = seconds
        }
        let minted: (token: String, claims: ClientTokenClaims)
        do throws(ClientTokenIssueError) {
            minted = try ClientToken.issue(app: app, user: user, device: device, lifetime: lifetime, now: Date())
        } catch {
            if error.field == "app" { throw .configuration(["herald \(name): \(error.message)"]) }
            throw .usage("--\(error.field): \(error.message)", command: name)
        }
        // The rule POST /v1/client-tokens and the stream apply: not a token every stream would refuse.
        let store = try await context.openStore(configuration)
        let problem: String?
        do { problem = try await store.clientTokenOwnerProblem(app: app.id, device: minted.claims.device, user: user) } catch {
            throw .runtime("cannot check the device's user: \(error)")
        }
        if let problem {
            throw .usage("--device: \(problem); a client token is minted for the user the device is registered to", command: name)
        }
        context.console.out(minted.token)
    }
}
