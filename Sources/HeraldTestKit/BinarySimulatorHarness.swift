import APNsBinaryProtocol
import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator

/// Starts the binary gateway and feedback simulators in-process for integration tests:
/// 127.0.0.1, port 0, mutual TLS with ``TestCertificates`` (server cert for 127.0.0.1, clients
/// must present a certificate from the test CA — `clientCertificate`/`clientKey` do).
///
/// ```swift
/// let gateway = try BinarySimulatorHarness.gateway { $0.invalidTokens = [deadHex] }
/// defer { gateway.stop() }
/// // point the transport at 127.0.0.1:gateway.port with TestCertificates' client identity and CA
/// #expect(await gateway.waitForNotifications(count: 3))
/// ```
public enum BinarySimulatorHarness {
    /// The TLS files for the simulators, from the shared test certificates.
    public static func tlsFiles(_ certificates: TestCertificates) -> APNsBinaryTLSFiles {
        APNsBinaryTLSFiles(certificateFile: certificates.serverCertificate, keyFile: certificates.serverKey,
                           clientCAFile: certificates.caFile)
    }

    /// A started gateway; `rules` adjusts the defaults (faults, limits).
    /// - Parameters:
    ///   - tls: `false` serves plaintext TCP (no client certificate).
    ///   - feedback: a feedback simulator to receive ``APNsBinarySimulator/Configuration/uninstalledTokens``.
    public static func gateway(tls: Bool = true, uninstalledTokens: Set<String> = [], feedback: FeedbackSimulator? = nil,
                               logger: Logger = .disabled,
                               rules: (inout APNsBinaryRules) -> Void = { _ in }) throws -> APNsBinarySimulator {
        var configuration = APNsBinarySimulator.Configuration(tls: tls ? tlsFiles(try TestCertificates.shared()) : nil)
        rules(&configuration.rules)
        configuration.uninstalledTokens = uninstalledTokens
        configuration.feedback = feedback
        configuration.logger = logger
        let simulator = APNsBinarySimulator(configuration: configuration)
        try simulator.start()
        return simulator
    }

    /// A started feedback service listing `deadTokens` (hex token, UNIX time).
    public static func feedback(tls: Bool = true, deadTokens: [(token: String, time: UInt32)] = [],
                                logger: Logger = .disabled) throws -> FeedbackSimulator {
        var configuration = FeedbackSimulator.Configuration(tls: tls ? tlsFiles(try TestCertificates.shared()) : nil)
        configuration.logger = logger
        let simulator = FeedbackSimulator(configuration: configuration)
        for entry in deadTokens {
            guard let bytes = BinaryHex.decode(entry.token) else { throw TestSetupError("dead token \"\(entry.token)\" is not hex") }
            simulator.addDeadToken(bytes, time: entry.time)
        }
        try simulator.start()
        return simulator
    }
}
