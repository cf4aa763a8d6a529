import FoundationEssentials
import HeraldCore
import HeraldGorush
import Testing

/// The `gorush` section: its keys, defaults, the authentication rule and errors with paths.
@Suite struct GorushConfigurationTests {
    static let apps = ["com.example.app": AppConfiguration(id: "com.example.app", routes: ["apns"])]

    func read(_ json: String) -> (GorushConfiguration?, [JSONIssue]) {
        let context = JSONReadContext(unknownKeys: .reject)
        let node = JSONNode(root: try! JSONValue.parse(json), context: context, path: "gorush")
        let section = GorushConfiguration(node: node, apps: Self.apps)
        context.reportUnknownKeys()
        return (section, context.errors)
    }

    @Test func loopbackDefaultsToNoAuthentication() {
        let (section, errors) = read(#"{"listen": "127.0.0.1:8088", "app": "com.example.app"}"#)
        #expect(errors.isEmpty)
        #expect(section == GorushConfiguration(listen: ListenAddress(host: "127.0.0.1", port: 8088), app: "com.example.app", auth: GorushConfiguration.Auth.none))
        #expect(section?.maxNotifications == 100 && section?.maxBodyBytes == 1 << 20)
    }

    @Test func otherAddressesDefaultToAPIKeysAndRefuseNone() {
        var (section, errors) = read(#"{"listen": "0.0.0.0:8088", "app": "com.example.app"}"#)
        #expect(errors.isEmpty && section?.auth == .apiKey)
        // An apiKey listener off loopback needs keys to check.
        #expect(section?.refusal(api: APIConfiguration()) == "gorush.auth: \"apiKey\" on 0.0.0.0:8088 needs at least one key in api.keys")
        #expect(GorushConfiguration(listen: ListenAddress(host: "127.0.0.1", port: 1), app: "a", auth: .apiKey).refusal(api: APIConfiguration()) == nil)
        (section, errors) = read(#"{"listen": "0.0.0.0:8088", "app": "com.example.app", "auth": "none"}"#)
        #expect(errors.map(\.path) == ["gorush.auth"] && errors.first?.message.contains("loopback") == true, "\(errors)")
    }

    @Test func errorsNameTheirKey() {
        var (_, errors) = read(#"{"app": "com.exmple.app"}"#)
        #expect(errors.map(\.path).sorted() == ["gorush.app", "gorush.listen"], "\(errors)")
        #expect(errors.contains { $0.message.contains("did you mean \"com.example.app\"") })
        (_, errors) = read(#"{"listen": "8088", "app": "com.example.app", "maxNotifications": 0, "auth": "token", "lisen": 1}"#)
        #expect(errors.map(\.path).sorted() == ["gorush.auth", "gorush.lisen", "gorush.listen", "gorush.maxNotifications"], "\(errors)")
    }
}
