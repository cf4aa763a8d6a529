import FoundationEssentials
import HeraldCore

extension ClientIdentity {
    /// Reads a transport section's client certificate: `p12File`, or `certFile` (a combined PEM)
    /// with an optional `keyFile`, and `passphrase` for an encrypted key or P12. Each problem is
    /// reported at the key at fault (a wrong passphrase at `passphrase`, a key that does not
    /// match at `keyFile`); the passphrase never appears in a message.
    /// - Returns: the identity and the file it came from, or `nil` after reporting on `node`.
    public static func read(_ node: ConfigNode) -> (identity: ClientIdentity, source: String)? {
        let passphrase = node.secret("passphrase")?.value
        if node.has("p12File") {
            if node.has("certFile") { node.error(at: "certFile", "give either p12File or certFile (+ keyFile), not both") }
            guard let p12 = node.filePath("p12File") else { return nil }
            do {
                return (try ClientIdentity.load(p12File: p12, passphrase: passphrase), p12)
            } catch {
                node.error(at: error.kind == .wrongPassphrase ? "passphrase" : "p12File", error.message)
                return nil
            }
        }
        guard let cert = node.filePath("certFile", required: true) else { return nil }
        let key = node.filePath("keyFile")
        if node.has("keyFile") && key == nil { return nil }
        do {
            return (try ClientIdentity.load(certificateFile: cert, keyFile: key, passphrase: passphrase), cert)
        } catch {
            let at: String
            switch error.kind {
            case .wrongPassphrase: at = "passphrase"
            case .certificateMismatch: at = "keyFile"
            default: at = key == nil ? "certFile" : "keyFile"
            }
            node.error(at: at, error.message)
            return nil
        }
    }
}
