import HeraldCrypto

/// RSA keys made once per test process. A 2048-bit key costs 0.1–1 s of CPU: tests that each
/// made their own kept both threads of the test pool busy for half a minute, and every test
/// that waited on a socket meanwhile timed out.
public enum TestKeys {
    /// The key of the service accounts tests make (``FCMSimulator/makeServiceAccount(clientEmail:register:key:)``).
    public static let rsa: RS256SigningKey = try! RS256SigningKey.generate(bits: 2048)
    /// A second key, for "signed with another key".
    public static let otherRSA: RS256SigningKey = try! RS256SigningKey.generate(bits: 2048)
}
