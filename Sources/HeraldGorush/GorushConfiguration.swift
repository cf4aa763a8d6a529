import FoundationEssentials
import Glibc
import HeraldCore

/// `gorush`: gorush's Web API (`POST /api/push`, `GET /api/stat/app`, `/healthz`) on a listener
/// of its own, as a drop-in for gorush's clients. Its presence turns the listener on.
///
/// ```json
/// "gorush": {"listen": "127.0.0.1:8088", "app": "com.example.app"}
/// ```
///
/// `platform: 1` (iOS) goes through the app's first route of platform `ios`, `platform: 2`
/// (Android) through its first route of platform `android`.
public struct GorushConfiguration: ConfigurationSection, Equatable {
    public static let key = "gorush"

    /// Who may call the listener.
    public enum Auth: String, CaseIterable, Sendable {
        /// No authentication, as gorush has none: only on a loopback `listen`.
        case none
        /// The main API's keys (`api.keys`), with the `send` scope, as `Authorization: Bearer <key>`.
        case apiKey
    }

    /// Where the gorush API listens (required).
    public var listen: ListenAddress
    /// The Herald app (a key of `apps`) whose routes take the notifications.
    public var app: String
    /// Default: `none` when ``listen`` is loopback, else `apiKey`.
    public var auth: Auth
    /// Most notifications in one request (gorush's `core.max_notification`); more get 400. Default 100.
    public var maxNotifications: Int = 100
    /// Largest request body, in bytes; larger get 413. Default 1 MiB.
    public var maxBodyBytes: Int = 1 << 20

    public init(listen: ListenAddress, app: String, auth: Auth? = nil, maxNotifications: Int = 100, maxBodyBytes: Int = 1 << 20) {
        self.listen = listen
        self.app = app
        self.auth = auth ?? (listen.isLoopback ? Auth.none : Auth.apiKey)
        self.maxNotifications = maxNotifications
        self.maxBodyBytes = maxBodyBytes
    }

    /// Reads the section; `apps` are those `app` may name.
    public init?(node: JSONNode, apps: [String: AppConfiguration]) {
        guard case .object = node.value else {
            node.error("expected an object with \"listen\" and \"app\", found \(node.value.typeDescription)")
            return nil
        }
        var listen: ListenAddress? = nil
        if let listenNode = node.child("listen", required: true), let text = listenNode.asString {
            listen = ListenAddress(text)
            if listen == nil { listenNode.error("expected host:port such as \"127.0.0.1:8088\" or \"[::1]:8088\", found \"\(text)\"") }
        }
        let app = node.string("app", required: true)
        if let app, apps[app] == nil {
            var message = "unknown app \"\(app)\"; configured: \(apps.keys.sorted().joined(separator: ", "))"
            if let s = Spelling.closest(to: app, in: apps.keys) { message += " (did you mean \"\(s)\"?)" }
            node.error(at: "app", message)
        }
        let auth = node.oneOf("auth", Auth.self)
        if let m = node.int("maxNotifications", in: 1...100_000) { maxNotifications = m }
        if let b = node.int("maxBodyBytes", in: 4096...(64 << 20)) { maxBodyBytes = b }
        guard let listen, let app else { return nil }
        self.listen = listen
        self.app = app
        self.auth = auth ?? (listen.isLoopback ? Auth.none : Auth.apiKey)
        if self.auth == Auth.none && !listen.isLoopback {
            node.error(at: "auth", "\"none\" is allowed only on a loopback listen address (127.0.0.1, ::1); "
                       + "use \"apiKey\" (the api.keys) for \(listen)")
        }
    }

    /// Why the daemon must not start with this section and `api` (an `apiKey` listener off
    /// loopback with no `api.keys` would be open to the network); `nil` when it may.
    public func refusal(api: APIConfiguration) -> String? {
        guard auth == .apiKey, api.keys.isEmpty, !listen.isLoopback else { return nil }
        return "gorush.auth: \"apiKey\" on \(listen) needs at least one key in api.keys"
    }
}

extension HeraldConfiguration {
    /// `herald check`'s lines for the `gorush` section: where it listens and which route takes
    /// each platform.
    public func gorushReport() -> (lines: [String], errors: Int) {
        guard let gorush = section(GorushConfiguration.self) else { return (["gorush: off (no \"gorush\" section)"], 0) }
        var lines = ["gorush: POST /api/push, GET /api/stat/app, GET /healthz on \(gorush.listen), app \(gorush.app), auth \(gorush.auth.rawValue)"]
        var errors = 0
        guard let app = app(gorush.app) else { return (lines, 1) }
        for (number, platform) in GorushPlatform.all {
            do {
                lines.append("  platform \(number) (\(platform)) → route \(try FanOut.firstRoute(of: platform, app: app, configuration: self))")
            } catch {
                lines.append("  platform \(number) (\(platform)): \(error.description) (requests for it get 400)")
            }
        }
        if let refusal = gorush.refusal(api: api) {
            errors += 1
            lines.append("    error: \(refusal)")
        }
        return (lines, errors)
    }
}
