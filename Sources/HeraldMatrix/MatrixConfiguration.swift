import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// `matrix`: the Matrix push gateway (`POST /_matrix/push/v1/notify`). Its presence turns the
/// endpoint on.
///
/// ```json
/// "matrix": {"listen": "127.0.0.1:8090",
///            "apps": {"im.vector.app.ios.prod": {"app": "com.example.app",
///                                                "defaultPayload": {"aps": {"mutable-content": 1}}},
///                     "im.vector.app.android": {"app": "com.example.android"},
///                     "im.vector.app.web": {"app": "com.example.web"}}}
/// ```
/// Each `app_id`'s pushers get the payload of its platform (``platform(of:app:configuration:)``):
/// Sygnal's APNs shape (``MatrixPayload``), its gcm v1 shape (``MatrixAndroidPayload``) or its
/// webpush shape (``MatrixWebPayload``).
public struct MatrixConfiguration: ConfigurationSection, Equatable {
    public static let key = "matrix"

    /// One Matrix `app_id` and the Herald app its pushers go to.
    public struct App: Sendable, Equatable {
        /// The pushers' `app_id`.
        public var appID: String
        /// The Herald app (a key of `apps`): its topic, routes and transports.
        public var app: String
        /// The environment of its tokens; default: that of the Herald app's first route that names one.
        public var environment: String?
        /// Merged under each pusher's `data.default_payload` (Sygnal-style: `aps` plus custom keys
        /// for iOS; data keys for Android; members of the service worker's JSON for the web).
        public var defaultPayload: [String: JSONValue]
        /// `ios`, `android` or `web`; `nil` (the default): decided from the Herald app's routes
        /// (``MatrixConfiguration/platform(of:app:configuration:)``).
        public var platform: Platform?
        /// An Android phone maker's channel (`huawei`, `xiaomi`, `oppo`, `vivo`, `fcm`): the
        /// pushers go through the app's first route whose plugin says it is that vendor's, with
        /// Android's payload. `nil` (the default): the platform's rule.
        public var vendor: String?

        public init(appID: String, app: String, environment: String? = nil, defaultPayload: [String: JSONValue] = [:],
                    platform: Platform? = nil, vendor: String? = nil) {
            self.appID = appID
            self.app = app
            self.environment = environment
            self.defaultPayload = defaultPayload
            self.platform = vendor != nil ? .android : platform
            self.vendor = vendor
        }
    }

    /// Its own listener; `nil` (the default) serves the endpoint on `api.listen`.
    public var listen: ListenAddress?
    /// By Matrix `app_id`. A pusher with another `app_id` is rejected.
    public var apps: [String: App]
    /// Largest notify body, in bytes. Default 128 KiB (an event's content is at most 64 KiB).
    public var maxBodyBytes: Int = 128 << 10
    /// Notify requests accepted per second for one `app_id` (a token bucket holding as many), from
    /// all sources together; more get 429. Requests naming no configured `app_id` (strangers, typos)
    /// share one bucket of their own, so they never use a real app's. Default 1000.
    public var maxRequestsPerSecond: Int = 1000
    /// Notify requests accepted per second from one source (an IPv4 address, or an IPv6 /64) for one
    /// `app_id` (again with one bucket for all unknown ones); more get 429. Below
    /// ``maxRequestsPerSecond`` so that one stranger cannot use up an app's budget. Default 200.
    public var maxRequestsPerSecondPerSource: Int = 200
    /// The homeservers' addresses (CIDR ranges, IPv4 and IPv6); requests from elsewhere get 403.
    /// `nil` (the default): any source.
    public var allowedSources: [IPNetwork]?
    /// Devices (pushkeys) the gateway keeps per `app_id`, dead ones included until pruned; a notify
    /// for a new pushkey past it is answered 503 `M_RESOURCE_LIMIT_EXCEEDED` (the homeserver retries;
    /// the pusher is kept). Default 100,000.
    public var maxDevicesPerApp: Int = 100_000

    public init(listen: ListenAddress? = nil, apps: [String: App], maxBodyBytes: Int = 128 << 10, maxRequestsPerSecond: Int = 1000,
                maxRequestsPerSecondPerSource: Int = 200, allowedSources: [IPNetwork]? = nil, maxDevicesPerApp: Int = 100_000) {
        self.listen = listen
        self.apps = apps
        self.maxBodyBytes = maxBodyBytes
        self.maxRequestsPerSecond = maxRequestsPerSecond
        self.maxRequestsPerSecondPerSource = maxRequestsPerSecondPerSource
        self.allowedSources = allowedSources
        self.maxDevicesPerApp = maxDevicesPerApp
    }

    /// Whether `address` may send notifies (always, without ``allowedSources``; never when the
    /// address is unknown and a list is set).
    public func allows(_ address: IPAddress?) -> Bool {
        guard let allowedSources else { return true }
        guard let address else { return false }
        return allowedSources.contains { $0.contains(address) }
    }

    /// Reads the section; `apps` are those `app` may name.
    public init?(node: JSONNode, apps heraldAppConfigurations: [String: AppConfiguration]) {
        let heraldApps = Set(heraldAppConfigurations.keys)
        guard case .object = node.value else {
            node.error("expected an object with \"apps\", found \(node.value.typeDescription)")
            return nil
        }
        if let listenNode = node.child("listen"), let text = listenNode.asString {
            if let address = ListenAddress(text) { listen = address } else {
                listenNode.error("expected host:port such as \"127.0.0.1:8090\" or \"[::1]:8090\", found \"\(text)\"")
            }
        }
        if let m = node.int("maxBodyBytes", in: 4096...(8 << 20)) { maxBodyBytes = m }
        if let r = node.int("maxRequestsPerSecond", in: 1...1_000_000) { maxRequestsPerSecond = r }
        if let r = node.int("maxRequestsPerSecondPerSource", in: 1...1_000_000) { maxRequestsPerSecondPerSource = r }
        if let d = node.int("maxDevicesPerApp", in: 1...100_000_000) { maxDevicesPerApp = d }
        if let sourcesNode = node.child("allowedSources") {
            if case .array = sourcesNode.value {
                var networks: [IPNetwork] = []
                for element in sourcesNode.elements() {
                    guard let text = element.asString else { continue }
                    if let network = IPNetwork(text) { networks.append(network) } else {
                        element.error("expected an address or CIDR range such as \"192.0.2.10\", \"10.0.0.0/8\" or \"2001:db8::/32\", found \"\(text)\"")
                    }
                }
                if sourcesNode.elements().isEmpty {
                    sourcesNode.error("must name at least one address or range (leave the key out to accept any source)")
                }
                allowedSources = networks
            } else {
                sourcesNode.error("expected an array of addresses or CIDR ranges such as [\"10.0.0.0/8\", \"2001:db8::/32\"], found \(sourcesNode.value.typeDescription)")
            }
        }
        apps = [:]
        guard let appsNode = node.child("apps", required: true) else { return }
        let members = appsNode.members()
        if members.isEmpty, case .object = appsNode.value { appsNode.error("must map at least one Matrix app_id to a Herald app") }
        for (appID, section) in members {
            guard case .object = section.value else {
                section.error("expected an object with \"app\", found \(section.value.typeDescription)")
                continue
            }
            guard let app = section.string("app", required: true) else { continue }
            if !heraldApps.contains(app) {
                var message = "unknown app \"\(app)\"; configured: \(heraldApps.sorted().joined(separator: ", "))"
                if let s = Spelling.closest(to: app, in: heraldApps) { message += " (did you mean \"\(s)\"?)" }
                section.error(at: "app", message)
            }
            let environment = section.oneOf("environment", APNsEnvironment.self)?.rawValue
            var platform: Platform? = nil
            if let p = section.string("platform") {
                if Self.platforms.contains(Platform(p)) { platform = Platform(p) } else {
                    section.error(at: "platform", "expected one of \(Self.platforms.map { "\"\($0)\"" }.joined(separator: ", ")), found \"\(p)\"")
                }
            }
            let vendor = section.string("vendor")
            if let vendor, let platform, platform != .android {
                section.error(at: "vendor", "names an Android phone maker's channel; an app_id of platform \(platform) has none")
            }
            if vendor != nil, environment != nil {
                section.error(at: "environment", "is the environment of APNs tokens; an app_id with a vendor has none")
            }
            if let platform, platform != .ios, environment != nil {
                section.error(at: "environment", "is the environment of APNs tokens; an app_id of platform \(platform) has none")
            }
            var payload: [String: JSONValue] = [:]
            if let p = section.child("defaultPayload") {
                if case .object(let o) = p.value {
                    p.allowKeys(Array(o.keys))
                    payload = o
                    for path in APSConversion.convert(o).dropped {
                        p.context.error("\(p.path).\(path)", Self.explain(path))
                    }
                } else {
                    p.error("expected an object such as {\"aps\": {\"mutable-content\": 1}}, found \(p.value.typeDescription)")
                }
            }
            apps[appID] = App(appID: appID, app: app, environment: environment, defaultPayload: payload, platform: platform, vendor: vendor)
        }
    }

    /// The platforms the gateway has a payload for.
    public static let platforms: [Platform] = [.ios, .android, .web]

    /// The platform whose payload `mapping`'s pushers get when one platform is possible: its
    /// `platform`; else iOS when it names an `environment`; else the platform of the Herald app's
    /// push routes when they share one (a route that carries any device, such as `log`, counts as
    /// iOS). `nil` when the app has routes of several platforms: each pushkey then takes the first
    /// route whose plugin takes it (``candidateRoutes(of:app:configuration:)``, the rule
    /// registration follows).
    public static func platform(of mapping: App, app: AppConfiguration, configuration: HeraldConfiguration) -> Platform? {
        if let p = mapping.platform { return p }
        if mapping.environment != nil { return .ios }
        let platforms = Set(pushRoutes(app: app, configuration: configuration).map(\.platform))
        return platforms.count == 1 ? platforms.first : nil
    }

    /// The app's push routes in registration order, with the payload shape each gets.
    static func pushRoutes(app: AppConfiguration, configuration: HeraldConfiguration) -> [(route: String, platform: Platform)] {
        configuration.routeOrder(app).compactMap { r in
            guard let spec = configuration.transports[r], spec.kind != HeraldConfiguration.localKind else { return nil }
            let p = spec.configuration.platform ?? .ios
            return platforms.contains(p) ? (r, p) : nil
        }
    }

    /// The routes a pushkey of `mapping` may take, in the order they are tried, each with the
    /// payload shape it gets: with a platform, that platform's first route; else the app's push
    /// routes in registration order (routes of a platform first; a route that carries any device,
    /// such as `log`, gets the iOS shape). The local route is never one: a pusher has no stream.
    public static func candidateRoutes(of mapping: App, app: AppConfiguration, configuration: HeraldConfiguration) -> [(route: String, platform: Platform)] {
        if let vendor = mapping.vendor {
            // The phone maker's channel: the app's first route whose plugin is that vendor's.
            return app.routes.first { configuration.transports[$0]?.configuration.vendor == vendor }.map { [($0, .android)] } ?? []
        }
        if let p = platform(of: mapping, app: app, configuration: configuration) {
            if p == .ios {
                // iOS tokens pick their route by environment when queued; the first that could is named.
                let ios = configuration.routeOrder(app).filter { r in
                    guard let spec = configuration.transports[r], spec.kind != HeraldConfiguration.localKind else { return false }
                    return spec.configuration.platform == .ios || spec.configuration.platform == nil
                }
                return ios.map { ($0, .ios) }
            }
            return (try? configuration.platformRoute(app: app, platform: p)).map { [($0, p)] } ?? []
        }
        return pushRoutes(app: app, configuration: configuration)
    }

    private static func explain(_ path: String) -> String {
        if path == "aps" { return "expected an object of Apple's aps keys" }
        if path == APNsPayload.notificationIDKey { return "is reserved: Herald sets it to the notification id in every APNs payload" }
        let key = path.split(separator: ".").last.map(String.init) ?? path
        if path.hasPrefix("aps.alert.") && !APSConversion.knownAlertKeys.contains(key) {
            return "Herald does not send this alert key; known: \(APSConversion.knownAlertKeys.sorted().joined(separator: ", "))"
        }
        if path.split(separator: ".").count == 2 && !APSConversion.knownAPSKeys.contains(key) {
            return "Herald does not send this aps key; known: \(APSConversion.knownAPSKeys.sorted().joined(separator: ", "))"
        }
        return "has a value Apple does not accept here (flags are 0 or 1, texts non-empty strings, badge a whole number, "
            + "relevance-score 0…1, interruption-level passive, active, time-sensitive or critical)"
    }
}

extension HeraldConfiguration {
    /// `herald check`'s report of the `matrix` section: where it listens, each app id's route,
    /// and an error for an app id whose Herald app has no transport for its tokens' environment
    /// (iOS) or no route of its platform (Android, web).
    public func matrixReport() -> (lines: [String], errors: Int) {
        guard let matrix = section(MatrixConfiguration.self) else { return (["matrix: off (no \"matrix\" section)"], 0) }
        var lines = ["matrix: POST /_matrix/push/v1/notify on \(matrix.listen?.description ?? "api.listen (\(api.listen))"), "
                     + "maxBodyBytes=\(matrix.maxBodyBytes) maxRequestsPerSecond=\(matrix.maxRequestsPerSecond) "
                     + "maxRequestsPerSecondPerSource=\(matrix.maxRequestsPerSecondPerSource) maxDevicesPerApp=\(matrix.maxDevicesPerApp) "
                     + "allowedSources=\(matrix.allowedSources.map { $0.map(\.description).joined(separator: ",") } ?? "any")"]
        var errors = 0
        for id in matrix.apps.keys.sorted() {
            let m = matrix.apps[id]!
            guard let app = app(m.app) else { continue }
            guard let platform = MatrixConfiguration.platform(of: m, app: app, configuration: self) else {
                // Each pushkey takes the first route whose plugin takes it.
                let candidates = MatrixConfiguration.candidateRoutes(of: m, app: app, configuration: self)
                let payload = m.defaultPayload.isEmpty ? "" : " defaultPayload=\(JSONValue.object(m.defaultPayload).jsonString)"
                if candidates.isEmpty {
                    errors += 1
                    lines.append("    error: matrix.apps[\"\(id)\"]: app \(m.app) has no route that could carry this app_id's pushes "
                                 + "(an ios, android or web route); add one to apps.\(m.app).routes")
                } else {
                    lines.append("  \(id) → app \(m.app) (by pushkey: \(candidates.map { "\($0.route) (\($0.platform))" }.joined(separator: ", ")))\(payload)")
                }
                continue
            }
            if let vendor = m.vendor {
                if let route = MatrixConfiguration.candidateRoutes(of: m, app: app, configuration: self).first?.route {
                    lines.append("  \(id) → app \(m.app) (android, vendor \(vendor), transport \(route))")
                } else {
                    errors += 1
                    lines.append("    error: matrix.apps[\"\(id)\"]: app \(m.app) has no route of vendor \(vendor); "
                                 + "add one to apps.\(m.app).routes or change \"vendor\"")
                }
                continue
            }
            if platform != .ios {
                let payload = m.defaultPayload.isEmpty ? "" : " defaultPayload=\(JSONValue.object(m.defaultPayload).jsonString)"
                if let route = try? platformRoute(app: app, platform: platform) {
                    lines.append("  \(id) → app \(m.app) (\(platform), transport \(route))\(payload)")
                } else {
                    errors += 1
                    lines.append("    error: matrix.apps[\"\(id)\"]: app \(m.app) has no \(platform) route; "
                                 + "add one to apps.\(m.app).routes or set \"platform\"")
                }
                continue
            }
            var given = DeviceAttributes()
            given[APNsEnvironment.attribute] = m.environment
            // The route a pushkey takes: the first that accepts an APNs token of the app id's environment.
            let probe = DeviceAddressInput.token(String(repeating: "0", count: 64))
            if let (transport, address) = firstRoute(app: app, input: probe, attributes: given), transports[transport]?.kind != Self.localKind {
                let payload = m.defaultPayload.isEmpty ? "" : " defaultPayload=\(JSONValue.object(m.defaultPayload).jsonString)"
                let environment = address.attributes.apnsEnvironment?.rawValue ?? "any"
                lines.append("  \(id) → app \(m.app) (\(environment), transport \(transport))\(payload)")
            } else {
                errors += 1
                lines.append("    error: matrix.apps[\"\(id)\"]: app \(m.app) has no route for \(m.environment ?? "its") tokens; "
                             + "add a transport with that environment to apps.\(m.app).routes or set \"environment\"")
            }
        }
        return (lines, errors)
    }
}
