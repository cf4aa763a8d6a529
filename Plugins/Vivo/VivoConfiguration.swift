import FoundationEssentials
import HeraldChinaPush
import HeraldCore

/// The `vivo` transport's configuration (its `transports.<name>` section): vivo push (also iQOO phones).
///
/// ```json
/// "vivo": {"type": "vivo", "appId": "12345", "appKey": "${VIVO_APP_KEY}", "appSecret": "${VIVO_APP_SECRET}"}
/// ```
public struct VivoConfiguration: TransportConfiguration {
    /// The app's id (`appId`).
    public var appID: String
    /// The app's key (`appKey`).
    public var appKey: Secret
    /// The app's secret (`appSecret`, from `${ENV}`): it signs the auth request. Never logged.
    public var appSecret: Secret
    /// vivo's origin (`endpoint`, default `https://api-push.vivo.com.cn`) and the client settings.
    public var connection: VendorConnection
    /// The class of a notification that names none (`messageClass`, default `marketing`).
    public var messageClass: MessageClass = .marketing
    /// The title of a notification that has only a body (`defaultTitle`, usually the app's name;
    /// without it the body is the title too): the vendor requires one.
    public var defaultTitle: String?
    /// Send in vivo's test mode (`testMode`, `pushMode` 1): only the app's registered test devices get them. Default false.
    public var testMode = false

    public static let defaultEndpoint = VendorOrigin(host: "api-push.vivo.com.cn")

    public init(appID: String, appKey: Secret, appSecret: Secret, connection: VendorConnection = VendorConnection(endpoint: defaultEndpoint)) {
        self.appID = appID
        self.appKey = appKey
        self.appSecret = appSecret
        self.connection = connection
    }

    public var platform: Platform? { .android }
    public var vendor: String? { "vivo" }

    public var summary: String {
        "vivo push app \(appID) via \(connection.summary), default class \(messageClass)\(testMode ? ", test mode (test devices only)" : "")"
    }

    public func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
        DeviceAddress(token: try VendorAddress.token(input, vendor: "vivo"))
    }

    public func render(_ content: NotificationContent, context: RenderContext) throws(ContentProblem) -> RenderedPayload {
        try VivoRenderer.render(content, context: context, configuration: self)
    }

    static func read(_ node: ConfigNode) -> VivoConfiguration? {
        let id = node.string("appId", required: true)
        if let id, !id.allSatisfy({ $0.isASCII && $0.isNumber }) {
            node.error(at: "appId", "expected vivo's numeric app id, such as \"12345\", found \"\(id)\"")
        }
        let key = node.secret("appKey", required: true)
        let secret = node.secret("appSecret", required: true)
        let connection = VendorConnection.read(node, defaultEndpoint: defaultEndpoint)
        let messageClass = node.oneOf("messageClass", MessageClass.self)
        let defaultTitle = node.string("defaultTitle")
        let test = node.bool("testMode")
        guard let id, let key, let secret, id.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        var c = VivoConfiguration(appID: id, appKey: key, appSecret: secret, connection: connection)
        if let messageClass { c.messageClass = messageClass }
        c.defaultTitle = defaultTitle
        if let test { c.testMode = test }
        return c
    }
}
