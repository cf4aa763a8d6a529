import FoundationEssentials
import HeraldCore
import Synchronization

/// A ``ChinaVendorSimulator``'s shared state and request routing; each vendor's rules are in an
/// extension of their own. Called on the server's connection threads.
final class ChinaVendorSimulatorCore: Sendable {
    static let hmsTokenPath = "/oauth2/v3/token"

    let vendor: ChinaVendor
    let credentials: ChinaVendorCredentials
    let tokenLifetime: TimeInterval
    let timestampTolerance: TimeInterval
    let clock: any WallClock
    let logger: Logger
    let retainsMessages: Bool
    let faults: Locked<ChinaVendorFaults>
    let counters = Locked(ChinaVendorCounters())
    let messages = Locked<[ChinaVendorReceived]>([])
    /// Access tokens issued and when each expires.
    let tokens = Locked<[String: Date]>([:])
    /// vivo's saved payloads (taskId → message).
    let tasks = Locked<[String: JSONValue]>([:])
    private let record: RecordFile?
    private let sequence = Atomic<UInt64>(0)

    init(configuration: ChinaVendorSimulator.Configuration) throws(ChinaVendorSimulatorError) {
        vendor = configuration.vendor
        credentials = configuration.credentials
        tokenLifetime = configuration.tokenLifetime
        timestampTolerance = configuration.timestampTolerance
        clock = configuration.clock
        logger = configuration.logger
        retainsMessages = configuration.retainsMessages
        faults = Locked(configuration.faults)
        if let path = configuration.recordFile {
            do { record = try RecordFile(path: path, truncate: false) } catch { throw ChinaVendorSimulatorError(error.description) }
        } else {
            record = nil
        }
    }

    func close() { record?.close() }

    func handle(_ request: SimulatorHTTP2Request) -> SimulatorHTTP2Response {
        guard request.method == "POST" else {
            return .json(405, #"{"error":"method \#(request.method) not allowed"}"#)
        }
        var response: SimulatorHTTP2Response
        switch vendor {
        case .hms: response = hms(request)
        case .xiaomi: response = xiaomi(request)
        case .oppo: response = oppo(request)
        case .vivo: response = vivo(request)
        }
        let latency = faults.withLock { $0.latency }
        if latency > 0 && response.action == .respond && request.pathWithoutQuery != Self.hmsTokenPath { response.delay = latency }
        return response
    }

    // MARK: Shared by the vendors' rules

    /// A fresh id: `prefix` + a counter + the time.
    func nextID(_ prefix: String) -> String {
        let n = sequence.add(1, ordering: .relaxed).newValue
        return "\(prefix)\(Int64(clock.now.timeIntervalSince1970 * 1000))\(n)"
    }

    /// Issues an access token.
    func issueToken() -> String {
        let token = nextID("sim-token-")
        tokens.withLock { $0[token] = clock.now.addingTimeInterval(tokenLifetime) }
        counters.withLock { $0.accessTokensIssued += 1 }
        return token
    }

    /// Whether `token` was issued and has not expired.
    func isValid(token: String?) -> Bool {
        guard let token, let expiry = tokens.withLock({ $0[token] }) else { return false }
        return clock.now < expiry
    }

    /// The counted fault that applies before the access token is checked.
    func takeExpiredToken() -> Bool {
        faults.withLock { f in
            guard f.expiredAccessTokens > 0 else { return false }
            f.expiredAccessTokens -= 1
            return true
        }
    }

    enum LimitFault { case rate, quota, server }

    /// The counted fault that applies to a valid send, if any.
    func takeLimitFault() -> LimitFault? {
        faults.withLock { f in
            if f.rateLimited > 0 { f.rateLimited -= 1; return .rate }
            if f.dailyQuota > 0 { f.dailyQuota -= 1; return .quota }
            if f.serverErrors > 0 { f.serverErrors -= 1; return .server }
            return nil
        }
    }

    var invalidTokens: Set<String> { faults.withLock { $0.invalidTokens } }
    var badCredentials: Bool { faults.withLock { $0.badCredentials } }

    func refusedAuth() { counters.withLock { $0.authRefusals += 1 } }
    func invalidRequest() { counters.withLock { $0.invalidRequests += 1 } }
    func countSend() { counters.withLock { $0.sends += 1 } }

    /// Records an accepted send (devices the vendor accepted: `tokens` minus the invalid ones).
    func accept(path: String, tokens: [String], message: JSONValue, id: String, invalid: Set<String>) {
        let delivered = tokens.filter { !invalid.contains($0) }
        guard !delivered.isEmpty else { return }
        let received = ChinaVendorReceived(path: path, tokens: delivered, message: message, id: id)
        counters.withLock { $0.devicesAccepted += delivered.count }
        if retainsMessages { messages.withLock { $0.append(received) } }
        if let record { record.write(Array((received.jsonLine + "\n").utf8)) }
    }

    /// Parses an `application/x-www-form-urlencoded` body; `nil` when malformed.
    static func form(_ body: [UInt8]) -> [String: String]? {
        var out: [String: String] = [:]
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecode(parts[0]), let value = percentDecode(parts.count > 1 ? parts[1] : []) else { return nil }
            out[name] = value
        }
        return out
    }

    static func percentDecode(_ bytes: ArraySlice<UInt8>) -> String? {
        var out: [UInt8] = []
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let b = bytes[i]
            if b == UInt8(ascii: "%") {
                guard bytes.endIndex - i >= 3, let hi = hex(bytes[i + 1]), let lo = hex(bytes[i + 2]) else { return nil }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(b == UInt8(ascii: "+") ? 0x20 : b)
                i += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    static func hex(_ b: UInt8) -> UInt8? {
        switch b {
        case 0x30...0x39: return b - 0x30
        case 0x41...0x46: return b - 0x41 + 10
        case 0x61...0x66: return b - 0x61 + 10
        default: return nil
        }
    }

    /// Characters as vivo counts them (a non-ASCII character counts 2).
    static func weighted(_ s: String) -> Int { s.unicodeScalars.reduce(0) { $0 + ($1.isASCII ? 1 : 2) } }

    static func hexString(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0x0F)]) }
        return String(decoding: out, as: UTF8.self)
    }
}
