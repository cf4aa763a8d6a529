import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit
import Testing

/// `herald simulate apns-http2` as a process, driven by curl.
@Suite("herald simulate apns-http2")
struct HTTP2CommandTests {
    func requireBinary() throws {
        guard FileManager.default.isExecutableFile(atPath: PackagePaths.heraldBinary) else {
            throw TestSetupError("build the herald binary first (swift build): \(PackagePaths.heraldBinary) is missing")
        }
    }

    @Test func servesTokenAuthRecordsAndSummarises() async throws {
        try requireBinary()
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let record = dir.file("out.jsonl")
        let dead = String(repeating: "cd", count: 32)
        let unregistered = try dir.write("unregistered.txt", "\(dead) 1767225600000\n")
        let sim = try ChildProcess.herald([
            "simulate", "apns-http2", "--port", "0", "--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey,
            "--auth-key-pub", "\(certs.authKeyID)=\(certs.authKeyPublic)", "--team", certs.teamID,
            "--unregistered", unregistered, "--record", record, "--topic", certs.topic,
        ])
        defer { sim.terminate() }
        let port = try #require(await sim.listeningPort(), "stderr: \(sim.stderr)")
        #expect(sim.stdout.hasPrefix("listening on 127.0.0.1:\(port)\n"))

        let jwt = try TestJWT.make(keyFile: certs.authKey, keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: Date())
        let base = "https://127.0.0.1:\(port)/3/device/"
        let args = ["-H", "authorization: bearer \(jwt)", "-H", "apns-topic: \(certs.topic)", "--data-binary", samplePayload]
        let r = try await Curl.run([.init(base + sampleToken, args), .init(base + dead, args)], caFile: certs.caFile).responses
        #expect(r.map(\.status) == [200, 410])
        #expect(r[1].body == #"{"reason":"Unregistered","timestamp":1767225600000}"#)

        sim.signal(SIGTERM)
        #expect(await sim.waitForExit() == 0)
        #expect(sim.stdout.contains("apns-http2 simulator: connections 1, requests 2, accepted 1, rejected 1 (Unregistered 1)"), "\(sim.stdout)")
        let lines = try String(contentsOfFile: record, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 1)
        #expect(lines.first?.contains(#""token":"\#(sampleToken)""#) == true)
    }

    @Test func managementPortServesChannelsAndTheProviderPortBroadcasts() async throws {
        try requireBinary()
        let certs = try TestCertificates.shared()
        let sim = try ChildProcess.herald([
            "simulate", "apns-http2", "--port", "0", "--management-port", "0", "--channel-limit", "1",
            "--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey,
            "--auth-key-pub", "\(certs.authKeyID)=\(certs.authKeyPublic)", "--team", certs.teamID, "--topic", certs.topic,
        ])
        defer { sim.terminate() }
        let port = try #require(await sim.listeningPort(), "stderr: \(sim.stderr)")
        let line = try #require(await sim.waitForLine(containing: "channel management on", timeout: 30), "stdout: \(sim.stdout)")
        let managementPort = try #require(Int(line[line.index(after: line.lastIndex(of: ":")!)...].prefix { $0.isNumber }))
        #expect(managementPort != port)

        let jwt = try TestJWT.make(keyFile: certs.authKey, keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: Date())
        let channels = "https://127.0.0.1:\(managementPort)/1/apps/\(certs.topic)/channels"
        let create = ["-H", "authorization: bearer \(jwt)", "--data-binary", #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#]
        let created = try await Curl.one(channels, create, caFile: certs.caFile)
        #expect(created.status == 201)
        let channel = try #require(created.headers["apns-channel-id"])
        let refused = try await Curl.one(channels, create, caFile: certs.caFile)
        #expect(refused.status == 400 && refused.body == #"{"reason":"CannotCreateChannelConfig"}"#)
        let unauthenticated = try await Curl.one(channels, ["--data-binary", #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#],
                                                 caFile: certs.caFile)
        #expect(unauthenticated.status == 403 && unauthenticated.body == #"{"reason":"MissingProviderToken"}"#)

        let requestID = "0b7f6c6e-3c1a-4d9e-9a51-2f1d0c3b4a59"
        let sent = try await Curl.one("https://127.0.0.1:\(port)/4/broadcasts/apps/\(certs.topic)", [
            "-H", "authorization: bearer \(jwt)", "-H", "apns-push-type: liveactivity", "-H", "apns-channel-id: \(channel)",
            "-H", "apns-priority: 5", "-H", "apns-request-id: \(requestID)",
            "--data-binary", #"{"aps":{"event":"update","timestamp":1790000000,"content-state":{"score":1}}}"#,
        ], caFile: certs.caFile)
        #expect(sent.status == 200)
        #expect(sent.headers["apns-request-id"] == requestID)
        #expect(sent.headers["apns-id"] == nil)
        #expect(sent.headers["apns-unique-id"] != nil)

        sim.signal(SIGTERM)
        #expect(await sim.waitForExit() == 0)
        #expect(sim.stdout.contains(", broadcasts 1\n"), "\(sim.stdout)")
    }

    @Test func sigintStopsWithTheSummaryAndExpiredTokensAnswer410() async throws {
        try requireBinary()
        let certs = try TestCertificates.shared()
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let expired = String(repeating: "ef", count: 32)
        let list = try dir.write("expired.txt", "\(expired) 1767225600000\n")
        let sim = try ChildProcess.herald([
            "simulate", "apns-http2", "--port", "0", "--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey,
            "--auth-key-pub", "\(certs.authKeyID)=\(certs.authKeyPublic)", "--team", certs.teamID, "--expired-tokens", list,
        ])
        defer { sim.terminate() }
        let port = try #require(await sim.listeningPort(), "stderr: \(sim.stderr)")
        let jwt = try TestJWT.make(keyFile: certs.authKey, keyID: certs.authKeyID, teamID: certs.teamID, issuedAt: Date())
        let args = ["-H", "authorization: bearer \(jwt)", "-H", "apns-topic: \(certs.topic)", "--data-binary", samplePayload]
        let r = try await Curl.run([.init("https://127.0.0.1:\(port)/3/device/\(expired)", args)], caFile: certs.caFile).responses
        #expect(r.first?.status == 410)
        #expect(r.first?.body == #"{"reason":"ExpiredToken","timestamp":1767225600000}"#)

        sim.signal(SIGINT)
        #expect(await sim.waitForExit() == 0)
        #expect(sim.stdout.contains("requests 1, accepted 0, rejected 1 (ExpiredToken 1)"), "\(sim.stdout)")
    }

    @Test func cleartextRefusesCertificateAuthentication() async throws {
        try requireBinary()
        let certs = try TestCertificates.shared()
        let r = try await Run.herald(["simulate", "apns-http2", "--port", "0", "--h2c", "--client-ca", certs.caFile])
        #expect(r.status == 2)
        #expect(r.stderr.contains("--client-ca needs TLS"), "\(r.stderr)")
    }

    @Test func helpDocumentsEveryFault() async throws {
        try requireBinary()
        let help = try await Run.herald(["simulate", "apns-http2", "--help"])
        #expect(help.status == 0)
        for option in ["--unregistered", "--expired-tokens", "--bad-device-token", "--not-for-topic", "--too-many-requests", "--reset-stream",
                       "--no-answer", "--device-limit", "--internal-server-errors", "--service-unavailable", "--throttle",
                       "--goaway-after", "--close-after", "--latency-ms",
                       "--max-concurrent-streams", "--record", "--auth-key-pub", "--client-ca", "--token-update-interval",
                       "--management-port", "--channel-limit"] {
            #expect(help.stdout.contains(option), "\(option)")
        }
    }

    @Test func usageErrorsNameTheOption() async throws {
        try requireBinary()
        let certs = try TestCertificates.shared()
        let none = try await Run.herald(["simulate", "apns-http2", "--tls-cert", certs.serverCertificate, "--tls-key", certs.serverKey])
        #expect(none.status == 2)
        #expect(none.stderr.contains("--auth-key-pub") && none.stderr.contains("--client-ca"))
        let noTeam = try await Run.herald(["simulate", "apns-http2", "--h2c", "--auth-key-pub", "K=/x.pem"])
        #expect(noTeam.status == 2)
        #expect(noTeam.stderr.contains("--team"))
        let noTLS = try await Run.herald(["simulate", "apns-http2", "--client-ca", "/x.pem"])
        #expect(noTLS.status == 2)
        #expect(noTLS.stderr.contains("--tls-cert"))
        let badKey = try await Run.herald(["simulate", "apns-http2", "--h2c", "--auth-key-pub", "K=/nonexistent.pem", "--team", "T"])
        #expect(badKey.status == 1)
        #expect(badKey.stderr.contains("/nonexistent.pem"))
    }
}
