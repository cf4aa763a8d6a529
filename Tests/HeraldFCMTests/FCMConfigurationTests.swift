import Foundation
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldFCM

@Suite("FCM configuration")
struct FCMConfigurationTests {
    @Test func aServiceAccountFileWithDefaults() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        _ = try dir.write("sa.json", TestAccounts.json())
        let (c, errors, warnings) = readFCMConfig(["credentialsFile": "sa.json"], baseDirectory: dir.path)
        #expect(errors.isEmpty && warnings.isEmpty, "\(errors) \(warnings)")
        let config = try #require(c)
        #expect(config.projectID == "herald-sim")
        #expect(config.endpoint.description == "https://fcm.googleapis.com:443")
        #expect(config.credentials.clientEmail == "herald-test@herald-sim.iam.gserviceaccount.com")
        #expect(config.credentials.tokenURI.path == "/token")
        #expect(config.credentials.signingKey != nil)
        #expect(config.platform == .android)
        #expect(config.connections == 1 && config.maxConcurrentStreams == 100 && config.engine == .nghttp2)
        #expect(!config.summary.contains("PRIVATE KEY") && config.summary.contains("herald-sim"))
    }

    @Test func theJSONItselfFromAnEnvironmentVariable() throws {
        let (c, errors, _) = readFCMConfig(["credentialsFile": .string(TestAccounts.json()), "projectId": "other-project",
                                            "endpoint": "https://127.0.0.1:8443", "connections": 2, "validateOnly": true])
        #expect(errors.isEmpty, "\(errors)")
        #expect(c?.projectID == "other-project")
        #expect(c?.endpoint.authority == "127.0.0.1:8443")
        #expect(c?.credentials.source == "the JSON in credentialsFile")
        #expect(c?.validateOnly == true && c?.connections == 2)
    }

    @Test func problemsNameTheKeyAndNoSecret() throws {
        var (c, errors, warnings) = readFCMConfig([:])
        #expect(c == nil && errors.count == 1 && errors[0].hasPrefix("credentialsFile"), "\(errors)")
        (c, errors, _) = readFCMConfig(["credentialsFile": "/no/such/file.json"])
        #expect(errors.first?.contains("no such file") == true)
        (c, errors, _) = readFCMConfig(["credentialsFile": .string(TestAccounts.json { $0["client_email"] = nil; $0["private_key_id"] = nil })])
        #expect(c == nil && errors.first?.contains("lacks client_email, private_key_id") == true, "\(errors)")
        (c, errors, _) = readFCMConfig(["credentialsFile": .string(TestAccounts.json { $0["type"] = "authorized_user" })])
        #expect(errors.first?.contains("service_account") == true)
        (c, errors, _) = readFCMConfig(["credentialsFile": .string(TestAccounts.json(tokenURI: "http://insecure/token"))])
        #expect(errors.first?.contains("token_uri") == true)
        (c, errors, _) = readFCMConfig(["credentialsFile": .string(TestAccounts.json()), "endpoint": "fcm.googleapis.com", "projectId": "X"])
        #expect(errors.contains { $0.hasPrefix("endpoint:") } && errors.contains { $0.hasPrefix("projectId:") }, "\(errors)")
        (c, errors, warnings) = readFCMConfig(["credentialsFile": .string(TestAccounts.json()), "colour": "red"])
        #expect(c != nil && (errors + warnings).contains { $0.hasPrefix("colour") }, "\(errors) \(warnings)")
        for e in errors { #expect(!e.contains("PRIVATE KEY")) }
    }

    @Test func anUnreadableKeyIsAWarningAndPausesTheTransportInstead() throws {
        let (c, errors, warnings) = readFCMConfig(["credentialsFile": .string(TestAccounts.json { $0["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n" })])
        #expect(errors.isEmpty)
        #expect(warnings.count == 1 && warnings[0].hasPrefix("credentialsFile: ") && warnings[0].contains("paused"), "\(warnings)")
        #expect(c?.credentials.signingKey == nil && c?.credentials.keyProblem != nil)
        #expect(!(warnings.first ?? "").contains("AAAA"))
    }

    @Test(arguments: [
        ("short", false), (registrationToken(), true), (registrationToken() + "!", false), (String(repeating: "a", count: 1025), false),
        ("dGVzdC10b2tlbi0xMjM0NTY3ODkwYWJjZGVmZ2hpamtsbW5vcA:APA91bX", true),
    ])
    func registrationTokens(_ token: String, _ ok: Bool) throws {
        let (c, _, _) = readFCMConfig(["credentialsFile": .string(TestAccounts.json())])
        let config = try #require(c)
        do {
            let address = try config.address(.token(token), attributes: DeviceAttributes())
            #expect(ok && address.token == token)
        } catch {
            #expect(!ok && error.field == "token" && error.message.contains("registration token"), "\(error)")
        }
    }
}
