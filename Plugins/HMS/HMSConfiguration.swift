import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// The `hms` transport's configuration (its `transports.<name>` section): Huawei Push Kit.
///
/// ```json
/// "huawei": {"type": "hms", "appId": "10086000", "appSecret": "${HMS_APP_SECRET}"}
/// ```
public struct HMSConfiguration: TransportConfiguration {
    /// The app's id in AppGallery Connect (`appId`): the OAuth client id and the path's `{appId}`.
    public var appID: String
    /// The app's secret (`appSecret`, from `${ENV}`): the OAuth client secret. Never logged.
    public var appSecret: Secret
    /// Push Kit's origin (`endpoint`, default `https://push-api.cloud.huawei.com`) and the client settings.
    public var connection: VendorConnection
    /// The OAuth 2.0 token endpoint (`authEndpoint`, default `https://oauth-login.cloud.huawei.com/oauth2/v3/token`).
    public var authEndpoint: VendorOrigin
    /// The class of a notification that names none (`messageClass`, default `marketing`, as Huawei
    /// treats an undeclared message).
    public var messageClass: MessageClass = .marketing
    /// The title of a notification that has only a body (`defaultTitle`, usually the app's name;
    /// without it the body is the title too): the vendor requires one.
    public var defaultTitle: String?

    public static let defaultEndpoint = VendorOrigin(host: "push-api.cloud.huawei.com")
    public static let defaultAuthEndpoint = VendorOrigin(host: "oauth-login.cloud.huawei.com", path: "/oauth2/v3/token")

    public init(appID: String, appSecret: Secret, connection: VendorConnection = VendorConnection(endpoint: defaultEndpoint),
                authEndpoint: VendorOrigin = defaultAuthEndpoint) {
        self.appID = appID
        self.appSecret = appSecret
        self.connection = connection
        self.authEndpoint = authEndpoint
    }

    public var platform: Platform? { .android }
    public var vendor: String? { "huawei" }

    public var summary: String {
        "Huawei Push Kit app \(appID) via \(connection.summary), tokens from \(authEndpoint), default class \(messageClass)"
    }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        DeviceAddress(token: try VendorAddress.token(input, vendor: "HMS"))
    }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try HMSRenderer.render(content, context: context, defaultClass: messageClass, defaultTitle: defaultTitle)
    }

    /// Reads and validates the section.
    static func read(_ node: ConfigNode) -> HMSConfiguration? {
        let appID = node.string("appId", required: true)
        if let appID, !appID.allSatisfy({ $0.isASCII && $0.isNumber }) {
            node.error(at: "appId", "expected the numeric app id from AppGallery Connect, such as \"10086000\", found \"\(appID)\"")
        }
        let secret = node.secret("appSecret", required: true)
        let connection = VendorConnection.read(node, defaultEndpoint: defaultEndpoint)
        var auth = defaultAuthEndpoint
        if let text = node.string("authEndpoint") {
            if let o = VendorOrigin(url: text) { auth = o } else {
                node.error(at: "authEndpoint", "expected https://host[:port]/path, such as \"\(defaultAuthEndpoint)\", found \"\(text)\"")
            }
        }
        let messageClass = node.oneOf("messageClass", MessageClass.self)
        let defaultTitle = node.string("defaultTitle")
        guard let appID, let secret, appID.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        var c = HMSConfiguration(appID: appID, appSecret: secret, connection: connection, authEndpoint: auth)
        if let messageClass { c.messageClass = messageClass }
        c.defaultTitle = defaultTitle
        return c
    }
}
