import Foundation

/// A fresh temporary folder, deleted by ``remove()``.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(prefix: String = "herald-test") throws {
        let base = FileManager.default.temporaryDirectory.path
        path = "\(base)/\(prefix)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// `path/name`.
    public func file(_ name: String) -> String { "\(path)/\(name)" }

    /// Writes text to `name` and returns its path.
    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        let p = file(name)
        try text.write(toFile: p, atomically: true, encoding: .utf8)
        return p
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Locations in the package checkout, for tests that run scripts or the built binary.
public enum PackagePaths {
    /// The package root (the folder holding Package.swift).
    public static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.path }
        }
        return FileManager.default.currentDirectoryPath
    }()

    /// The `herald` executable built next to the running tests (`.build/<config>/herald`).
    public static var heraldBinary: String { executable("herald") }

    /// The package's executable `name` (`herald`, `herald-bench`) built next to the running tests.
    public static func executable(_ name: String) -> String {
        let testBundle = Bundle.main.bundleURL
        let candidates = [
            testBundle.appendingPathComponent(name).path,
            testBundle.deletingLastPathComponent().appendingPathComponent(name).path,
            "\(root)/.build/debug/\(name)",
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates.last!
    }
}

/// Throwaway TLS material from `scripts/make-test-certs.sh`, made once per test process.
///
/// Holds a CA, a loopback server certificate, client certificates (PEM, combined PEM,
/// encrypted key, P12 with ``p12Passphrase``), and APNs auth keys (see the script's header).
public struct TestCertificates: Sendable {
    public let directory: String
    public var caFile: String { "\(directory)/ca.pem" }
    public var serverCertificate: String { "\(directory)/server.pem" }
    public var serverKey: String { "\(directory)/server.key" }
    public var clientCertificate: String { "\(directory)/client.pem" }
    public var clientKey: String { "\(directory)/client.key" }
    public var clientEncryptedKey: String { "\(directory)/client-encrypted.key" }
    public var clientCombined: String { "\(directory)/client-combined.pem" }
    public var clientP12: String { "\(directory)/client.p12" }
    public var otherCA: String { "\(directory)/other-ca.pem" }
    public var otherClientCertificate: String { "\(directory)/other-client.pem" }
    public var otherClientKey: String { "\(directory)/other-client.key" }
    /// The `.p8` token-auth key (EC P-256).
    public var authKey: String { "\(directory)/AuthKey_ABC123DEFG.p8" }
    public var authKeyPublic: String { "\(directory)/AuthKey_ABC123DEFG.pub.pem" }
    /// A P-384 key APNs would refuse.
    public var p384Key: String { "\(directory)/AuthKey_P384.p8" }
    /// A VAPID key (EC P-256) for Web Push.
    public var vapidKey: String { "\(directory)/vapid.key" }
    /// A Google service account (RSA key) whose `token_uri` is the FCM simulator's default port.
    public var fcmServiceAccount: String { "\(directory)/fcm-service-account.json" }
    public let authKeyID = "ABC123DEFG"
    public let teamID = "DEF123GHIJ"
    public let topic = "com.example.app"
    public let p12Passphrase = "herald-test-passphrase"

    private static let made: Result<String, TestSetupError> = {
        let dir = FileManager.default.temporaryDirectory.path + "/herald-test-certs-\(getpid())"
        let result: ProcessResult
        do {
            result = try Run.blocking("/bin/bash", ["\(PackagePaths.root)/scripts/make-test-certs.sh", dir])
        } catch {
            return .failure(TestSetupError("cannot run make-test-certs.sh: \(error)"))
        }
        guard result.status == 0 else {
            return .failure(TestSetupError("make-test-certs.sh exited with \(result.status): \(result.stderr.suffix(500))"))
        }
        return .success(dir)
    }()

    /// The shared set (generated on first use).
    public static func shared() throws -> TestCertificates {
        TestCertificates(directory: try made.get())
    }
}

/// A test fixture could not be set up.
public struct TestSetupError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Waits (real time, polling every 5 ms) until `condition` holds; returns whether it did.
public func eventually(timeout: TimeInterval = 60, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let end = Date().addingTimeInterval(timeout)
    while Date() < end {
        if try await condition() { return true }
        try? await Task.sleep(nanoseconds: 5_000_000)
    }
    return try await condition()
}
