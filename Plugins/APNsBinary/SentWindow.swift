import APNsBinaryProtocol
import HeraldAPNs
import HeraldCore

/// The notifications written on one connection and not yet proven, and what the gateway's one
/// answer (an error response, or none before the connection ended) proves about them.
///
/// Pure: no I/O, tested directly. The gateway answers only errors, processes a connection's
/// notifications in order, and closes after its one error response, so an error response naming
/// identifier N proves that everything written before N was accepted, and says nothing about
/// what came after (discarded, to be written again on a new connection).
struct SentWindow {
    /// What one answer settled.
    struct Resolution {
        /// Proven accepted, in order, with the evidence for each.
        var delivered: ArraySlice<BinaryFrame> = []
        var evidence = ""
        /// The notification the error was about, with its outcome.
        var failed: (frame: BinaryFrame, outcome: DeliveryOutcome)? = nil
        /// Not proven: to be written again on a new connection, in this order, ahead of anything newer.
        var resend: ArraySlice<BinaryFrame> = []
    }

    /// The connection's number (for evidence texts).
    let connection: Int
    private var entries: [BinaryFrame] = []
    private var head = 0
    /// The identifier of `entries[head]`.
    private var firstIdentifier: UInt32 = 1
    private(set) var nextIdentifier: UInt32 = 1
    /// The identifier of the proof frame, once written (nothing is written after it).
    private(set) var proofIdentifier: UInt32? = nil

    init(connection: Int) {
        self.connection = connection
    }

    /// Notifications written and not yet proven.
    var count: Int { entries.count - head }
    var isEmpty: Bool { count == 0 }

    /// Records a notification as written; returns its identifier.
    mutating func append(_ frame: BinaryFrame) -> UInt32 {
        if head > 4096 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
        entries.append(frame)
        defer { nextIdentifier &+= 1 }
        return nextIdentifier
    }

    /// Reserves the identifier of the proof frame (written after everything in the window).
    mutating func appendProof() -> UInt32 {
        proofIdentifier = nextIdentifier
        defer { nextIdentifier &+= 1 }
        return nextIdentifier
    }

    /// The gateway's error response.
    /// - Parameter identified: whether the notifications carried identifiers (not command 0).
    mutating func resolve(_ response: APNsBinaryErrorResponse, identified: Bool) -> Resolution {
        var r = Resolution()
        let id = response.identifier
        let index: Int? = identified && id >= firstIdentifier && Int(id - firstIdentifier) < count ? Int(id - firstIdentifier) : nil
        if let proof = proofIdentifier, id == proof, identified || proof != 0 {
            r.evidence = "proven: the gateway rejected Herald's proof notification (identifier \(proof), status \(response.status.rawValue)) written after it on connection \(connection)"
            r.delivered = take(count)
        } else if response.status == .shutdown {
            if let index {
                r.evidence = "proven: the gateway's shutdown (status 10) on connection \(connection) named identifier \(id), at or after it, as the last accepted"
                r.delivered = take(index + 1)
            }
            r.resend = take(count)
        } else if let index {
            r.evidence = "proven: the gateway rejected a later notification (identifier \(id), status \(response.status.rawValue)) on connection \(connection)"
            r.delivered = take(index)
            let failed = take(1).first!
            r.failed = (failed, BinaryStatusMapping.outcome(for: response.status))
            r.resend = take(count)
        } else if !identified && count == 1 {
            // Command 0 carries no identifier; with one notification in the window there is no doubt.
            let failed = take(1).first!
            r.failed = (failed, BinaryStatusMapping.outcome(for: response.status))
        } else {
            // The response names no notification Herald wrote here (command 0, or an unknown
            // identifier): nothing is proven. Write each again on its own, proven one by one.
            r.resend = ArraySlice(take(count).map { var f = $0; f.isolate = !identified; return f })
        }
        return r
    }

    /// The connection ended without an answer: nothing is proven; everything is written again.
    mutating func lost() -> [BinaryFrame] {
        take(count).map { var f = $0; f.losses += 1; return f }
    }

    /// The next `n` entries, without copying them (a slice of the window's storage).
    private mutating func take(_ n: Int) -> ArraySlice<BinaryFrame> {
        let slice = entries[head..<head + n]
        head += n
        firstIdentifier &+= UInt32(n)
        return slice
    }
}

/// What each status of the error response means for the notification it names.
enum BinaryStatusMapping {
    static func outcome(for status: APNsBinaryStatus) -> DeliveryOutcome {
        switch status.rawValue {
        case 8:
            return .tokenInvalid(since: nil, reason: "\(status.rawValue) \(status.name)")
        case 2...7, 128:
            return .rejected(reason: "\(status.rawValue) \(status.name)")
        case 1, 255:
            return .retry(after: nil, reason: "\(status.rawValue) \(status.name)")
        default:
            return .retry(after: nil, reason: "unknown status \(status.rawValue) from the gateway")
        }
    }

    /// A setup problem (what to fix) when a TLS or connection failure says the gateway refused
    /// this side's certificate or could not be trusted; `nil` for temporary failures.
    static func setupProblem(_ failure: String) -> String? {
        let text = failure.lowercased()
        let certificateAlerts = ["alert bad certificate", "alert unknown ca", "alert certificate expired",
                                 "alert certificate revoked", "alert certificate unknown", "alert certificate required",
                                 "alert access denied", "alert unsupported certificate", "alert handshake failure",
                                 "alert decrypt error"]
        if certificateAlerts.contains(where: { text.contains($0) }) {
            return "the gateway refused the client certificate (\(failure)); check certFile/p12File: issued for this environment, not expired, not revoked"
        }
        if text.contains("server certificate failed verification") || text.contains("certificate verify failed") {
            return "the gateway's certificate could not be verified (\(failure)); check caFile and endpoint"
        }
        return nil
    }
}
