import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore
import HeraldCrypto

/// What every gateway connection shares.
struct GatewaySettings: Sendable {
    var name: String
    var configuration: APNsBinaryConfiguration
    var tls: TLSClientContext
    var logger: Logger
    var clock: any WallClock
    var metrics: BinaryMetrics
    /// Most notifications written and unproven on one connection before a proof is forced.
    var windowLimit = 50_000
    /// A window this large is proven as soon as there is nothing more to write, whatever the
    /// budget; writing this many earns the budget one proof (see ``ProofBudget``).
    var proofBatch = 1000
    /// Connections proofs may end in a burst before `proofInterval` paces them (see ``ProofBudget``).
    var proofBurst = GatewaySettings.defaultProofBurst
    static let defaultProofBurst = 10
    /// Connections lost while a notification was unproven before it is handed back as a retry.
    var lossLimit = 3
}

/// One long-lived connection to the gateway, streaming frames on a thread of its own.
///
/// The thread writes queued notifications as fast as TLS takes them (64 KiB per write, never
/// waiting per notification), and polls the socket for the gateway's 6-byte error response the
/// whole time. Written notifications wait in a ``SentWindow`` until something proves them:
/// an error response for a later one, a shutdown (status 10) naming them, or Herald's proof
/// notification, written when there is nothing more to write (paced by a ``ProofBudget`` while
/// fewer than `proofBatch` wait; at once when stopping or when the window reaches `windowLimit`). After any error response or lost connection, the unproven
/// notifications are written again, in order, on a new connection (opened while the proof was
/// answered when more is queued). A notification unproven on `lossLimit` connections is handed
/// back as a retry, so every `deliver` ends in bounded time.
/// - Important: the state below the lock is owned by the connection's thread alone.
final class GatewayConnection: @unchecked Sendable {
    private let settings: GatewaySettings
    let index: Int
    private let lock = ConditionLock()
    /// Submitted, not yet taken by the thread (guarded by `lock`).
    private var submitted: [BinaryFrame] = []
    private var stopping = false
    private var finished: CheckedContinuation<Void, Never>?
    private var hasFinished = false
    /// Wakes the thread's poll: a pipe, read end first.
    private let wakePipe: [Int32]
    private var wakeFD: Int32 { wakePipe[0] }

    // Thread-owned state.
    private var queue: [BinaryFrame] = []
    private var queueHead = 0
    private var tls: TLSConnection?
    /// The next connection, opened while a proof is answered (see ``prepareStandby()``).
    private var standby: TLSConnection?
    private var window = SentWindow(connection: 0)
    private var connectionNumber = 0
    private var out: [UInt8] = []
    private var outOffset = 0
    private var proofDeadline: ContinuousClock.Instant?
    /// How many connections proofs may still end now (see ``ProofBudget``).
    private lazy var proofBudget = ProofBudget(interval: settings.configuration.proofInterval, burst: settings.proofBurst,
                                               notificationsPerProof: settings.proofBatch)
    private var response: [UInt8] = []
    private var consecutiveFailures = 0
    private var backoffUntil: ContinuousClock.Instant?
    private var readBuffer = [UInt8](repeating: 0, count: 4096)

    init(settings: GatewaySettings, index: Int) {
        self.settings = settings
        self.index = index
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) != 0 { fatalError("pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakePipe = fds
        out.reserveCapacity(80 * 1024)
    }

    deinit {
        close(wakePipe[0])
        close(wakePipe[1])
    }

    func start() {
        OSThread.start(name: "apns-binary-\(settings.name)-\(index)") { [self] in
            run()
            let c: CheckedContinuation<Void, Never>? = lock.withLock {
                hasFinished = true
                defer { finished = nil }
                return finished
            }
            c?.resume()
        }
    }

    /// Queues frames to be written in this order.
    func submit(_ frames: [BinaryFrame]) {
        let accepted: Bool = lock.withLock {
            guard !stopping else { return false }
            submitted.append(contentsOf: frames)
            return true
        }
        guard accepted else {
            for f in frames { f.complete(.retry(after: nil, reason: "transport \(settings.name) is shutting down")) }
            return
        }
        wake()
    }

    /// Writes what is queued, proves it, closes, and returns when the thread has ended.
    func stop() async {
        lock.withLock { stopping = true }
        wake()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done: Bool = lock.withLock {
                if hasFinished { return true }
                finished = c
                return false
            }
            if done { c.resume() }
        }
    }

    private func wake() {
        var one: UInt8 = 1
        _ = Glibc.write(wakePipe[1], &one, 1)
    }

    // MARK: The thread

    private var queued: Int { queue.count - queueHead }

    private func run() {
        while true {
            let (incoming, isStopping) = lock.withLock { () -> ([BinaryFrame], Bool) in
                defer { submitted = [] }
                return (submitted, stopping)
            }
            if !incoming.isEmpty {
                if queueHead > 0 && queueHead * 2 >= queue.count {
                    queue.removeFirst(queueHead)
                    queueHead = 0
                }
                queue.append(contentsOf: incoming)
            }
            if tls == nil {
                if queued == 0 {
                    if isStopping {
                        standby?.shutdown()
                        return
                    }
                    waitForWork(timeout: -1)
                    continue
                }
                if let until = backoffUntil, ContinuousClock.now < until {
                    failQueued(.retry(after: secondsUntil(until), reason: lastFailure))
                    continue
                }
                connect()
                continue
            }
            fillAndWrite(stopping: isStopping)
            guard tls != nil else { continue }
            if out.count - outOffset == 0 && proofDeadline == nil {
                if window.isEmpty && queued == 0 && isStopping {
                    closeConnection()
                    standby?.shutdown()
                    return
                }
                let urgent = needsProofNow
                if !window.isEmpty && (queued == 0 || urgent) {
                    // Held back only while notifications trickle and the proof budget is spent: a
                    // window of `proofBatch` or more pays for its reconnect at once.
                    let due = window.count >= settings.proofBatch ? ContinuousClock.now : proofBudget.due()
                    if isStopping || urgent || ContinuousClock.now >= due {
                        writeProof()
                        continue
                    }
                    pollConnection(timeout: ContinuousClock.now.duration(to: due))
                    continue
                }
            }
            prepareStandby()
            if let deadline = proofDeadline, ContinuousClock.now >= deadline {
                readResponse()  // the answer may be waiting (a standby handshake held the thread)
                if tls != nil, proofDeadline == deadline {
                    connectionLost("no answer to the proof notification within \(settings.configuration.timeout) s")
                }
                continue
            }
            let wantsWrite = out.count - outOffset > 0
            if wantsWrite, ContinuousClock.now - lastWriteProgress > .milliseconds(Int64(settings.configuration.timeout * 1000)) {
                readResponse()
                if tls != nil, out.count - outOffset > 0 {
                    connectionLost("the gateway took no data for \(settings.configuration.timeout) s")
                }
                continue
            }
            let canWriteMore = proofDeadline == nil && queued > 0 && !wantsWrite
            if canWriteMore { continue }
            pollConnection(timeout: proofDeadline.map { ContinuousClock.now.duration(to: $0) } ?? (wantsWrite ? .seconds(1) : .seconds(3600)))
        }
    }

    /// Whether the window must be proven before anything more is written: it is full, it holds
    /// an isolated notification, or the next one must be written alone.
    private var needsProofNow: Bool {
        !window.isEmpty && (window.count >= settings.windowLimit || lastWrittenIsolated
                            || (queued > 0 && queue[queueHead].isolate))
    }
    private var lastWrittenIsolated = false
    /// When TLS last took bytes (a gateway that stops reading is given up after `timeout`).
    private var lastWriteProgress = ContinuousClock.now
    private var lastFailure = ""

    private func secondsUntil(_ instant: ContinuousClock.Instant) -> TimeInterval {
        let d = ContinuousClock.now.duration(to: instant)
        return max(0, Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
    }

    private func failQueued(_ outcome: DeliveryOutcome) {
        queue[queueHead...].complete(outcome)
        queue.removeAll(keepingCapacity: true)
        queueHead = 0
    }

    private func connect() {
        let c = settings.configuration
        let cert = c.identity.certificate
        if cert.notAfter <= settings.clock.now {
            let reason = "the client certificate (\(cert.commonName ?? cert.subject)) expired on \(cert.notAfter.iso8601); renew it in the Apple Developer portal"
            failQueued(.setupFailure(reason: reason))
            return
        }
        do {
            let connection: TLSConnection
            if let ready = standby {
                standby = nil
                connection = ready
            } else {
                connection = try open()
            }
            tls = connection
            lastWriteProgress = ContinuousClock.now
            consecutiveFailures = 0
            connectionNumber += 1
            window = SentWindow(connection: connectionNumber)
            out.removeAll(keepingCapacity: true)
            outOffset = 0
            response = []
            proofDeadline = nil
            settings.metrics.connects.increment()
            settings.logger.debug("gateway connected", ["connection": "\(index).\(connectionNumber)", "endpoint": c.endpoint.description])
        } catch {
            connectFailed(error.message)
        }
    }

    /// A new TLS connection to the gateway, non-blocking.
    private func open(timeout: TimeInterval? = nil) throws(CryptoError) -> TLSConnection {
        let c = settings.configuration
        let connection = try TLSClient.connect(host: c.endpoint.host, port: c.endpoint.port, context: settings.tls,
                                               timeout: timeout ?? c.timeout)
        let flags = fcntl(connection.fd, F_GETFL)
        _ = fcntl(connection.fd, F_SETFL, flags | O_NONBLOCK)
        return connection
    }

    /// While a proof is out and more is queued, the next connection is opened (handshake and
    /// all) so writing resumes the moment the answer comes. Nothing is written on it before.
    private func prepareStandby() {
        guard standby == nil, proofDeadline != nil, queued > 0, out.count == outOffset else { return }
        // Short: the proof's answer is not read while this handshake runs.
        do { standby = try open(timeout: min(1, settings.configuration.timeout)) } catch {
            settings.logger.debug("standby connection failed; connecting after the answer", ["reason": error.message])
        }
    }

    private func connectFailed(_ message: String) {
        settings.metrics.failures.increment()
        if let problem = BinaryStatusMapping.setupProblem(message) {
            settings.logger.error("gateway refused the setup", ["reason": problem])
            failQueued(.setupFailure(reason: problem))
        } else {
            consecutiveFailures += 1
            let delay = min(30, 0.1 * pow(2, Double(min(consecutiveFailures - 1, 10)))) * (0.5 + Double.random(in: 0..<0.5))
            backoffUntil = ContinuousClock.now + .milliseconds(Int64(delay * 1000))
            lastFailure = "cannot reach the gateway \(settings.configuration.endpoint): \(message)"
            settings.logger.warning("gateway connection failed", ["reason": message, "backoff_s": delay.fixed(2)])
            failQueued(.retry(after: delay, reason: lastFailure))
        }
    }

    /// Encodes queued frames into `out` (up to 64 KiB) and writes what TLS takes without blocking.
    private func fillAndWrite(stopping: Bool) {
        let format = settings.configuration.format
        var written = 0
        defer { if written > 0 { proofBudget.wrote(written) } }
        while proofDeadline == nil && out.count - outOffset < 64 * 1024 && queued > 0 && window.count < settings.windowLimit {
            if lastWrittenIsolated && !window.isEmpty { break }  // an isolated frame waits for its proof
            let frame = queue[queueHead]
            if frame.isolate && !window.isEmpty { break }
            queueHead += 1
            if outOffset > 0 && outOffset == out.count {
                out.removeAll(keepingCapacity: true)
                outOffset = 0
            } else if outOffset > 1 << 20 {
                // Written bytes are dropped while TLS keeps taking only part (the connection
                // allows a moving write buffer, so the unwritten rest may move).
                out.removeFirst(outOffset)
                outOffset = 0
            }
            let id = window.append(frame)
            written += 1
            lastWrittenIsolated = frame.isolate
            APNsBinaryFrameEncoder.append(to: &out, format: format, token: frame.token, payload: frame.payload,
                                          identifier: id, expiry: frame.expiry, priority: frame.priority)
        }
        writePending()
    }

    private func writePending() {
        guard let tls else { return }
        while outOffset < out.count {
            let result = out.withUnsafeBytes { tls.write(UnsafeRawBufferPointer(rebasing: $0[outOffset...])) }
            switch result {
            case .bytes(let n):
                outOffset += n
                lastWriteProgress = ContinuousClock.now
            case .wantRead, .wantWrite:
                return
            case .closed:
                readAfterFailure("the gateway closed the connection")
                return
            case .failed(let reason):
                readAfterFailure(reason)
                return
            }
        }
        out.removeAll(keepingCapacity: true)
        outOffset = 0
    }

    /// Writes the deliberately invalid notification (an empty token) whose rejection proves
    /// everything written before it on this connection.
    private func writeProof() {
        let id = window.appendProof()
        let format: APNsBinaryFormat = settings.configuration.format == .simple ? .enhanced : settings.configuration.format
        APNsBinaryFrameEncoder.append(to: &out, format: format, token: [UInt8](), payload: Array("{}".utf8),
                                      identifier: id, expiry: 0, priority: 10)
        proofDeadline = ContinuousClock.now + .milliseconds(Int64(settings.configuration.timeout * 1000))
        settings.metrics.proofs.increment()
        writePending()
    }

    /// Waits for the socket (readable; writable when output is pending) or a wake-up.
    private func pollConnection(timeout: Duration) {
        guard let tls else { return }
        if tls.hasBufferedData { readResponse(); return }
        var fds = [pollfd(fd: tls.fd, events: Int16(POLLIN) | (out.count > outOffset ? Int16(POLLOUT) : 0), revents: 0),
                   pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        let r = poll(&fds, 2, milliseconds(timeout))
        if r <= 0 { return }
        if fds[1].revents != 0 { drainWake() }
        if fds[0].revents & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0 { readResponse() }
    }

    private func waitForWork(timeout: Int32) {
        var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        if poll(&fds, 1, timeout) > 0 { drainWake() }
    }

    private func drainWake() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while Glibc.read(wakeFD, &bytes, 64) == 64 {}
    }

    private func milliseconds(_ d: Duration) -> Int32 {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000 + 1
        return Int32(clamping: max(0, ms))
    }

    /// Reads what the gateway sent: its error response, or the end of the connection.
    private func readResponse() {
        guard let tls else { return }
        while true {
            let result = readBuffer.withUnsafeMutableBytes { tls.read(into: $0) }
            switch result {
            case .bytes(let n):
                response += readBuffer[0..<n]
                if response.count >= 6 {
                    answered(Array(response[0..<6]))
                    return
                }
            case .wantRead, .wantWrite:
                return
            case .closed:
                connectionLost("the gateway closed the connection without an error response")
                return
            case .failed(let reason):
                connectionLost(reason)
                return
            }
        }
    }

    /// A write failed: the gateway may have answered and closed; read its answer if it is there.
    private func readAfterFailure(_ reason: String) {
        guard let tls else { return }
        var fds = [pollfd(fd: tls.fd, events: Int16(POLLIN), revents: 0)]
        if tls.hasBufferedData || poll(&fds, 1, 1000) > 0 {
            let before = connectionNumber
            readResponse()
            if self.tls == nil || connectionNumber != before { return }
        }
        connectionLost(reason)
    }

    private func answered(_ bytes: [UInt8]) {
        guard let response = APNsBinaryErrorResponse(bytes: bytes) else {
            connectionLost("the gateway sent \(bytes) instead of an error response")
            return
        }
        let identified = settings.configuration.format.carriesIdentifier
        if let proof = window.proofIdentifier, response.identifier == proof {
            proofBudget.spend()  // this connection ended because of a proof
        }
        let resolution = window.resolve(response, identified: identified)
        resolution.delivered.complete(.delivered(receipt: nil, evidence: resolution.evidence))
        settings.metrics.delivered.increment(by: Int64(resolution.delivered.count))
        if let (frame, outcome) = resolution.failed {
            frame.complete(outcome)
            settings.logger.info("gateway rejected a notification", ["status": "\(response.status.rawValue)",
                                                                     "reason": response.status.name,
                                                                     "token": Redact.token(BinaryHex.encode(frame.token))])
        }
        if response.identifier != window.proofIdentifier ?? 0 || resolution.failed != nil {
            settings.logger.debug("gateway error response", ["status": response.status.description, "identifier": "\(response.identifier)",
                                                            "resent": "\(resolution.resend.count)"])
        }
        if resolution.delivered.isEmpty && resolution.failed == nil {
            // An answer that proved nothing (a shutdown before anything was accepted, an unknown
            // identifier) counts like a lost connection, so a gateway that keeps doing it cannot
            // hold notifications forever.
            closeConnection()
            let counted = resolution.resend.map { var f = $0; f.losses += 1; return f }
            requeueUnproven(counted, reason: "the gateway answered status \(response.status.rawValue) and proved nothing")
            return
        }
        requeue(resolution.resend)
        closeConnection()
    }

    /// The connection ended without an answer: unproven notifications are written again.
    private func connectionLost(_ reason: String) {
        let unproven = window.lost()
        closeConnection()
        if unproven.isEmpty && BinaryStatusMapping.setupProblem(reason) == nil {
            settings.logger.debug("gateway closed an idle connection", ["reason": reason])
            return
        }
        settings.metrics.failures.increment()
        if let problem = BinaryStatusMapping.setupProblem(reason) {
            standby?.shutdown()
            standby = nil
            settings.logger.error("gateway refused the setup", ["reason": problem])
            for f in unproven { f.complete(.setupFailure(reason: problem)) }
            failQueued(.setupFailure(reason: problem))
            return
        }
        settings.logger.warning("gateway connection lost; unproven notifications are sent again",
                                ["reason": reason, "unproven": "\(unproven.count)"])
        requeueUnproven(unproven, reason: reason)
    }

    /// Writes `frames` again (their `losses` already counted), except those unproven on
    /// ``GatewaySettings/lossLimit`` connections already: they go back to the dispatcher as a retry.
    private func requeueUnproven(_ frames: some Collection<BinaryFrame>, reason: String) {
        var again: [BinaryFrame] = []
        for f in frames {
            if f.losses >= settings.lossLimit {
                f.complete(.retry(after: nil, reason: "the gateway connection was lost \(f.losses) times before it proved the notification (\(reason))"))
            } else {
                again.append(f)
            }
        }
        requeue(again)
    }

    private func requeue(_ frames: some Collection<BinaryFrame>) {
        guard !frames.isEmpty else { return }
        queue = Array(frames) + queue[queueHead...]
        queueHead = 0
        settings.metrics.resent.increment(by: Int64(frames.count))
    }

    private func closeConnection() {
        tls?.shutdown()
        tls = nil
        proofDeadline = nil
        lastWrittenIsolated = false
        out.removeAll(keepingCapacity: true)
        outOffset = 0
        response = []
    }
}

/// Paces the connections that proofs end: a budget of `burst` proofs, spent when a proof's
/// answer ends a connection, earned back at one per `interval` and one per
/// `notificationsPerProof` notifications written. Busy connections and bursts of small batches
/// (`herald send`) are never held; light steady traffic renews a connection at most once per
/// `interval`. Connections an error ended are not counted: the gateway ended them.
struct ProofBudget {
    let interval: TimeInterval
    let burst: Double
    let notificationsPerProof: Double
    private var available: Double
    private var updated = ContinuousClock.now

    init(interval: TimeInterval, burst: Int, notificationsPerProof: Int) {
        self.interval = interval
        self.burst = Double(max(1, burst))
        self.notificationsPerProof = Double(max(1, notificationsPerProof))
        available = self.burst
    }

    private mutating func refill() {
        let now = ContinuousClock.now
        let elapsed = updated.duration(to: now)
        updated = now
        guard interval > 0 else { available = burst; return }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        available = min(burst, available + seconds / interval)
    }

    /// When the next proof may be written: now while one is left in the budget.
    mutating func due() -> ContinuousClock.Instant {
        refill()
        if available >= 1 { return updated }
        return updated + .milliseconds(Int64(((1 - available) * interval * 1000).rounded(.up)))
    }

    /// `count` notifications were written.
    mutating func wrote(_ count: Int) {
        available = min(burst, available + Double(count) / notificationsPerProof)
    }

    /// A proof ended a connection.
    mutating func spend() {
        refill()
        available = max(0, available - 1)
    }
}
