import Foundation
import HeraldCore
import HeraldHMS
import HeraldOPPO
import HeraldTestKit
import HeraldVivo
import HeraldXiaomi
import Testing

/// An FCM-like route for routing tests: Android, vendor "fcm", tokens of FCM's alphabet only.
final class FakeFCMTransport: TransportPlugin {
    struct Configuration: TransportConfiguration {
        var summary: String { "fake fcm" }
        var platform: Platform? { .android }
        var vendor: String? { "fcm" }
        func address(_ input: DeviceAddressInput, attributes: DeviceAttributes) throws(AddressProblem) -> DeviceAddress {
            guard case .token(let t) = input, t.utf8.count >= 32,
                  t.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_:-".unicodeScalars.contains($0)) }) else {
                throw AddressProblem(field: "token", "not an FCM registration token")
            }
            return DeviceAddress(token: t)
        }
    }
    static let kind = "fake-fcm"
    static func configuration(from node: ConfigNode) -> Configuration? { Configuration() }
    let name: String
    init(name: String, configuration: Configuration, context: TransportContext) throws { self.name = name }
    func deliver(_ batch: [Delivery]) async -> [DeliveryOutcome] { batch.map { _ in .delivered(receipt: nil) } }
}

@Suite("Registration picks a phone's own channel")
struct VendorRoutingTests {
    static let config = """
        {"apps": {"com.example.app": {"routes": ["android", "huawei", "xiaomi", "oppo", "vivo"]}},
         "transports": {
           "android": {"type": "fake-fcm"},
           "huawei": {"type": "hms", "appId": "10086000", "appSecret": "${S}"},
           "xiaomi": {"type": "xiaomi", "appSecret": "${S}", "packageName": "com.example.app"},
           "oppo": {"type": "oppo", "appKey": "k", "masterSecret": "${S}"},
           "vivo": {"type": "vivo", "appId": "1", "appKey": "${S}", "appSecret": "${S}"}}}
        """

    func configuration() throws -> HeraldConfiguration {
        var registry = TransportRegistry()
        for p in [FakeFCMTransport.self, HMSTransport.self, XiaomiTransport.self, OPPOTransport.self, VivoTransport.self] as [any TransportPlugin.Type] {
            register(p, in: &registry)
        }
        return try HeraldConfiguration.parse(Data(Self.config.utf8), source: "test.json", baseDirectory: "/", registry: registry,
                                             environment: ["S": "secret-value"])
    }

    func register<P: TransportPlugin>(_ p: P.Type, in registry: inout TransportRegistry) { registry.register(p) }

    @Test func theVendorPicksTheAppsFirstRouteOfThatPlugin() throws {
        let c = try configuration()
        let app = try #require(c.apps["com.example.app"])
        let token = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd"
        for (vendor, route) in [("huawei", "huawei"), ("xiaomi", "xiaomi"), ("oppo", "oppo"), ("vivo", "vivo"), ("fcm", "android")] {
            let picked = try c.registrationRoute(app: app, input: .token(token), attributes: DeviceAttributes(), transport: nil,
                                                 platform: .android, vendor: vendor)
            #expect(picked.transport == route, "\(vendor)")
        }
        #expect(throws: AddressProblem.self) {
            _ = try c.registrationRoute(app: app, input: .token(token), attributes: DeviceAttributes(), transport: nil, platform: nil, vendor: "meizu")
        }
        do {
            _ = try c.registrationRoute(app: app, input: .token(token), attributes: DeviceAttributes(), transport: nil, platform: nil, vendor: "meizu")
        } catch {
            #expect(error.field == "vendor" && error.message.contains("huawei (huawei)") && error.message.contains("android (fcm)"))
        }
        // "transport" still wins.
        #expect(try c.registrationRoute(app: app, input: .token(token), attributes: DeviceAttributes(), transport: "vivo",
                                        platform: .android, vendor: "huawei").transport == "vivo")
    }

    @Test func androidAlonePicksTheFirstAndroidRouteThatTakesTheAddress() throws {
        let c = try configuration()
        let app = try #require(c.apps["com.example.app"])
        let fcmToken = "dGVzdF90b2tlbl9mb3JfZmNtX3JvdXRpbmdfMTIz"
        #expect(try c.registrationRoute(app: app, input: .token(fcmToken), attributes: DeviceAttributes(), transport: nil, platform: .android).transport == "android")
        // A Xiaomi regid has "+/=": FCM refuses it, the next Android route takes it.
        let regid = "hP+2k8WmQ1Lr/0abcdEFGHijkl+MNopQRstuVWxyz012345="
        #expect(try c.registrationRoute(app: app, input: .token(regid), attributes: DeviceAttributes(), transport: nil, platform: .android).transport == "huawei")
    }
}
