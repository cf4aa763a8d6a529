import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import Synchronization

/// The faults in force, shared by every connection; connections keep a snapshot and refresh it
/// when ``version`` changes, so the hot path reads no lock when no fault is set.
final class HTTP2FaultBoard: Sendable {
    private struct State {
        var faults: HTTP2Faults
        var perDevice: [String: Int] = [:]
    }

    private let state: Locked<State>
    private let versionCounter = Atomic<Int>(0)

    init(_ faults: HTTP2Faults) {
        state = Locked(State(faults: faults.normalized))
    }

    /// Changes whenever the faults change.
    var version: Int { versionCounter.load(ordering: .acquiring) }

    var faults: HTTP2Faults { state.withLock { $0.faults } }

    /// The faults and the version they belong to.
    func snapshot() -> (faults: HTTP2Faults, version: Int) {
        state.withLock { s in (s.faults, versionCounter.load(ordering: .acquiring)) }
    }

    /// Replaces the faults (and restarts the 500/503/429 and per-device counts).
    func set(_ faults: HTTP2Faults) {
        state.withLock { s in
            s.faults = faults.normalized
            s.perDevice = [:]
            versionCounter.add(1, ordering: .releasing)
        }
    }

    /// What to do instead of answering a valid request to `token` (lower case), if anything.
    func streamFault(token: String) -> HTTP2StreamFault? {
        state.withLock { s in
            if s.faults.resetTokens.contains(token) { return .reset }
            if s.faults.unansweredTokens.contains(token) { return .noAnswer }
            return nil
        }
    }

    /// The fault for an otherwise accepted notification to `token` (lower case), if any;
    /// consumes one of the 500/503/429 answers.
    func decide(token: String) -> (reason: APNsHTTP2Reason, timestamp: Int64?)? {
        state.withLock { s in
            let f = s.faults
            if let time = f.unregistered[token] { return (.unregistered, time.millisecondsSince1970) }
            if let time = f.expiredTokens[token] { return (.expiredToken, time.millisecondsSince1970) }
            if f.badDeviceTokens.contains(token) { return (.badDeviceToken, nil) }
            if f.tokensNotForTopic.contains(token) { return (.deviceTokenNotForTopic, nil) }
            if f.tooManyRequests.contains(token) { return (.tooManyRequests, nil) }
            if let limit = f.requestsPerDeviceLimit {
                let n = s.perDevice[token, default: 0]
                if n >= limit { return (.tooManyRequests, nil) }
                s.perDevice[token] = n + 1
            }
            if f.internalServerErrors > 0 {
                s.faults.internalServerErrors -= 1
                if s.faults.internalServerErrors == 0 { versionCounter.add(1, ordering: .releasing) }
                return (.internalServerError, nil)
            }
            if f.serviceUnavailable > 0 {
                s.faults.serviceUnavailable -= 1
                if s.faults.serviceUnavailable == 0 { versionCounter.add(1, ordering: .releasing) }
                return (.serviceUnavailable, nil)
            }
            if f.throttledRequests > 0 {
                s.faults.throttledRequests -= 1
                if s.faults.throttledRequests == 0 { versionCounter.add(1, ordering: .releasing) }
                return (.tooManyRequests, nil)
            }
            return nil
        }
    }
}

/// A stream the simulator does not answer.
enum HTTP2StreamFault: Sendable {
    /// `RST_STREAM INTERNAL_ERROR` at once.
    case reset
    /// Nothing: the stream stays open.
    case noAnswer
}
