import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// The `oppo` transport's configuration (its `transports.<name>` section): OPPO push (also OnePlus and realme phones).
///
/// ```json
/// "oppo": {"type": "oppo", "appKey": "${OPPO_APP_KEY}", "masterSecret": "${OPPO_MASTER_SECRET}", "channelId": "messages"}
/// ```
public struct OPPOConfiguration: TransportConfiguration {
    /// The app's key (`appKey`).
    public var appKey: String
    /// The app's master secret (`masterSecret`, from `${ENV}`): it signs the auth request. Never logged.
    public var masterSecret: Secret
    /// OPPO's origin (`endpoint`, default `https://api.push.oppomobile.com`) and the client settings.
    public var connection: VendorConnection
    /// The class of a notification that names none (`messageClass`, default `marketing`).
    public var messageClass: MessageClass = .marketing
    /// The title of a notification that has only a body (`defaultTitle`, usually the app's name;
    /// without it the body is the title too): the vendor requires one.
    public var defaultTitle: String?
    /// The notification channel the app created (`channelId`): OPPO needs one on Android 8 and later.
    public var channelID: String?

    public static let defaultEndpoint = VendorOrigin(host: "api.push.oppomobile.com")

    public init(appKey: String, masterSecret: Secret, connection: VendorConnection = VendorConnection(endpoint: defaultEndpoint)) {
        self.appKey = appKey
        self.masterSecret = masterSecret
        self.connection = connection
    }

    public var platform: Platform? { .android }
    public var vendor: String? { "oppo" }

    public var summary: String { "OPPO push via \(connection.summary), default class \(messageClass)" }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        DeviceAddress(token: try VendorAddress.token(input, vendor: "OPPO"))
    }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try OPPORenderer.render(content, context: context, configuration: self)
    }

    static func read(_ node: ConfigNode) -> OPPOConfiguration? {
        let key = node.string("appKey", required: true)
        let secret = node.secret("masterSecret", required: true)
        let connection = VendorConnection.read(node, defaultEndpoint: defaultEndpoint)
        let messageClass = node.oneOf("messageClass", MessageClass.self)
        let defaultTitle = node.string("defaultTitle")
        let channel = node.string("channelId")
        guard let key, let secret else { return nil }
        var c = OPPOConfiguration(appKey: key, masterSecret: secret, connection: connection)
        if let messageClass { c.messageClass = messageClass }
        c.defaultTitle = defaultTitle
        c.channelID = channel
        return c
    }
}
