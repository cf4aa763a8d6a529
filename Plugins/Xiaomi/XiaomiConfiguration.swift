import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// The `xiaomi` transport's configuration (its `transports.<name>` section): Xiaomi (Mi) Push.
///
/// ```json
/// "xiaomi": {"type": "xiaomi", "appSecret": "${XIAOMI_APP_SECRET}", "packageName": "com.example.app",
///            "systemChannelId": "im", "marketingChannelId": "promo"}
/// ```
public struct XiaomiConfiguration: TransportConfiguration {
    /// The app's secret (`appSecret`, from `${ENV}`), sent as `Authorization: key=<appSecret>`. Never logged.
    public var appSecret: Secret
    /// The app's package (`packageName`): `restricted_package_name`.
    public var packageName: String
    /// Xiaomi's origin (`endpoint`, default `https://api.xmpush.xiaomi.com`) and the client settings.
    public var connection: VendorConnection
    /// The class of a notification that names none (`messageClass`, default `marketing`).
    public var messageClass: MessageClass = .marketing
    /// The title of a notification that has only a body (`defaultTitle`, usually the app's name;
    /// without it the body is the title too): the vendor requires one.
    public var defaultTitle: String?
    /// The channel registered with Xiaomi for system messages (`systemChannelId`): `extra.channel_id` of IM, account, order… messages.
    public var systemChannelID: String?
    /// The channel for operational messages (`marketingChannelId`).
    public var marketingChannelID: String?

    public static let defaultEndpoint = VendorOrigin(host: "api.xmpush.xiaomi.com")

    public init(appSecret: Secret, packageName: String, connection: VendorConnection = VendorConnection(endpoint: defaultEndpoint)) {
        self.appSecret = appSecret
        self.packageName = packageName
        self.connection = connection
    }

    public var platform: Platform? { .android }
    public var vendor: String? { "xiaomi" }

    public var summary: String {
        "Xiaomi push for \(packageName) via \(connection.summary), default class \(messageClass)"
    }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        DeviceAddress(token: try VendorAddress.token(input, vendor: "Xiaomi"))
    }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try XiaomiRenderer.render(content, context: context, configuration: self)
    }

    static func read(_ node: ConfigNode) -> XiaomiConfiguration? {
        let secret = node.secret("appSecret", required: true)
        let package = node.string("packageName", required: true)
        if let package, !isPackageName(package) {
            node.error(at: "packageName", "expected an Android package name such as \"com.example.app\", found \"\(package)\"")
        }
        let connection = VendorConnection.read(node, defaultEndpoint: defaultEndpoint)
        let messageClass = node.oneOf("messageClass", MessageClass.self)
        let defaultTitle = node.string("defaultTitle")
        let system = node.string("systemChannelId")
        let marketing = node.string("marketingChannelId")
        guard let secret, let package, isPackageName(package) else { return nil }
        var c = XiaomiConfiguration(appSecret: secret, packageName: package, connection: connection)
        if let messageClass { c.messageClass = messageClass }
        c.defaultTitle = defaultTitle
        c.systemChannelID = system
        c.marketingChannelID = marketing
        return c
    }

    /// `a.b[.c…]`: letters, digits and underscores, each part starting with a letter.
    static func isPackageName(_ s: String) -> Bool {
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count >= 2 && parts.allSatisfy { p in
            guard let f = p.first, f.isASCII, f.isLetter else { return false }
            return p.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
        }
    }
}
