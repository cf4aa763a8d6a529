import FoundationEssentials
import HeraldCore
import HeraldCrypto

extension CertificateInfo {
    /// `herald check` findings on an APNs client certificate at `now`: its expiry (a warning under
    /// 30 days, an error once expired) and Apple's environment markers against `environment`.
    public func checkFindings(now: Date, environment: APNsEnvironment) -> [CheckFinding] {
        var findings: [CheckFinding] = []
        let remaining = notAfter.timeIntervalSince(now)
        let days = Int(remaining / 86400)
        if remaining <= 0 {
            findings.append(CheckFinding(.error, "the certificate expired on \(notAfter.iso8601); renew it in the Apple Developer portal"))
        } else if days < 30 {
            findings.append(CheckFinding(.warning, "the certificate expires in \(days) days (\(notAfter.iso8601)); renew it soon"))
        } else {
            findings.append(CheckFinding(.ok, "certificate valid until \(notAfter.iso8601) (\(days) days)"))
        }
        if environment == .production && isDevelopment && !isProduction {
            findings.append(CheckFinding(.warning, "the certificate is for the sandbox only, but environment is production"))
        }
        if environment == .sandbox && isProduction && !isDevelopment {
            findings.append(CheckFinding(.warning, "the certificate is for production only, but environment is sandbox"))
        }
        return findings
    }
}
