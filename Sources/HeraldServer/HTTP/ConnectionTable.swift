/// The open connections of an ``HTTPServer`` as its request deadlines, its per-address limit and
/// its shedding see them. Pure bookkeeping: the server calls it on its own thread under its lock,
/// and does the I/O (closing the sockets it returns).
///
/// A connection is in one phase at a time:
/// - `waiting` for a request: from its accept (the first request's headers are due
///   ``Limits/headerTimeout`` after it), or from the end of the previous response (the next
///   request line is due ``Limits/idleTimeout`` after it);
/// - `headers`: its request line arrived on a reused connection (headers due ``Limits/headerTimeout`` after);
/// - `body`: its headers are complete (body due ``Limits/bodyTimeout`` after);
/// - `busy`: the request is complete and being answered (no deadline: the server's time);
/// - `stream`: it holds a stream (no deadline, not counted against the per-address limit).
///
/// It is also of one kind (``Kind``): `unknown` until its request line has been read,
/// then `api` or `stream` by that request's path. Only an `api` connection counts against the
/// API's budget (`server.connectionLimit`): a connection whose request the server has not read
/// yet is not slow (its bytes may wait in the kernel while the server reads ten thousand others
/// in a reconnect storm), and a stream opening counts against the streams' own budget.
///
/// Only connections that wait or receive (no request in a handler, no stream) can be shed; the
/// oldest of them goes first (see ``shedOldest(sparing:among:)``).
struct ConnectionTable {
    /// The bounds the table enforces.
    struct Limits {
        var headerTimeout: Double
        var bodyTimeout: Double
        /// How long a reused connection may wait for its next request line.
        var idleTimeout: Double
        /// Connections (streams aside) one non-loopback address may hold; 0: no limit.
        var perAddress: Int
    }

    /// Why a connection was closed by the server.
    enum ShedReason: String, CaseIterable {
        /// Its request's headers were not complete in time.
        case headerTimeout = "header_timeout"
        /// Its request's body was not complete in time.
        case bodyTimeout = "body_timeout"
        /// A reused connection whose next request line did not arrive in time.
        case idleTimeout = "idle_timeout"
        /// The connection limit was reached and this was the oldest connection not being answered.
        case pressure
    }

    /// A peer address (IPv4 as IPv4-mapped IPv6), as 16 bytes.
    struct Peer: Hashable {
        var high: UInt64
        var low: UInt64

        init(_ bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8)) {
            let b = [bytes.0, bytes.1, bytes.2, bytes.3, bytes.4, bytes.5, bytes.6, bytes.7,
                     bytes.8, bytes.9, bytes.10, bytes.11, bytes.12, bytes.13, bytes.14, bytes.15]
            high = b[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
            low = b[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
        }

        init(high: UInt64, low: UInt64) {
            self.high = high
            self.low = low
        }

        /// 127.0.0.0/8 (IPv4 or IPv4-mapped) or ::1.
        var isLoopback: Bool {
            if high == 0 && low == 1 { return true }
            return high == 0 && low >> 32 == 0xffff && (low >> 24) & 0xff == 127
        }
    }

    enum Phase { case waiting, headers, body, busy, stream }

    /// What a connection carries, as far as the server has read it.
    enum Kind {
        /// No request line read yet (just accepted: the server has not looked at its bytes).
        case unknown
        /// API requests: counted against the API's connection budget.
        case api
        /// A stream, or a request that opens one: counted against the streams' budget.
        case stream
    }

    struct Entry {
        let fd: Int32
        /// The address counted against ``Limits/perAddress`` (`nil`: loopback or unknown, not limited).
        let peer: Peer?
        var phase: Phase = .waiting
        var kind: Kind = .unknown
        /// When it started waiting for its current request (accept, or the end of the previous response).
        var since: Double
        var deadline: Double?
        var reused = false
        var shed = false
        var countedForPeer: Bool
    }

    let limits: Limits
    private(set) var entries: [UInt: Entry] = [:]
    private(set) var perAddress: [Peer: Int] = [:]
    /// Connections closed by the server whose close the library has not reported yet.
    private(set) var shedPending = 0
    /// Connections of kind ``Kind/api`` that are not closing: what the API's budget counts.
    private(set) var apiConnections = 0

    init(limits: Limits) { self.limits = limits }

    /// Whether a new connection from `peer` is within the per-address limit.
    func admits(_ peer: Peer?) -> Bool {
        guard let peer, !peer.isLoopback, limits.perAddress > 0 else { return true }
        return perAddress[peer, default: 0] < limits.perAddress
    }

    mutating func opened(_ id: UInt, fd: Int32, peer: Peer?, now: Double) {
        let limited = peer.flatMap { $0.isLoopback ? nil : $0 }
        entries[id] = Entry(fd: fd, peer: limited, since: now, deadline: now + limits.headerTimeout, countedForPeer: limited != nil)
        if let limited { perAddress[limited, default: 0] += 1 }
    }

    /// A request line arrived: on a reused connection its headers are due from now.
    mutating func requestLine(_ id: UInt, now: Double) {
        guard var e = entries[id], e.phase == .waiting else { return }
        e.phase = .headers
        if e.reused { e.deadline = now + limits.headerTimeout }
        entries[id] = e
    }

    /// The connection's request is known to be an API request or a stream opening (from its
    /// request line, then from its method and path once its headers are complete).
    mutating func classify(_ id: UInt, stream: Bool) {
        guard var e = entries[id], e.phase != .stream else { return }
        setKind(&e, stream ? .stream : .api)
        entries[id] = e
    }

    /// The headers are complete: the body is due from now.
    mutating func headersComplete(_ id: UInt, now: Double) {
        guard var e = entries[id], e.phase == .waiting || e.phase == .headers else { return }
        e.phase = .body
        e.deadline = now + limits.bodyTimeout
        entries[id] = e
    }

    /// The request is complete (or answered early): no deadline while it is answered.
    mutating func busy(_ id: UInt) {
        guard var e = entries[id], e.phase != .stream else { return }
        e.phase = .busy
        e.deadline = nil
        entries[id] = e
    }

    /// The connection holds a stream: no deadline, not counted per address.
    mutating func becameStream(_ id: UInt) {
        guard var e = entries[id] else { return }
        e.phase = .stream
        e.deadline = nil
        setKind(&e, .stream)
        if e.countedForPeer, let peer = e.peer { release(peer); e.countedForPeer = false }
        entries[id] = e
    }

    /// Its response is done; the connection may carry another request.
    mutating func responded(_ id: UInt, now: Double) {
        guard var e = entries[id] else { return }
        e.phase = .waiting
        e.since = now
        e.deadline = now + limits.idleTimeout
        e.reused = true
        // The next request on it is read as soon as it comes: a kept-alive connection is the API's.
        setKind(&e, .api)
        if !e.countedForPeer, let peer = e.peer { perAddress[peer, default: 0] += 1; e.countedForPeer = true }
        entries[id] = e
    }

    mutating func closed(_ id: UInt) {
        guard let e = entries.removeValue(forKey: id) else { return }
        if e.shed { shedPending -= 1 } else if e.kind == .api { apiConnections -= 1 }
        if e.countedForPeer, let peer = e.peer { release(peer) }
    }

    /// Marks the oldest connection of one of `kinds` that is waiting for or receiving a request
    /// (never `sparing`) as shed and returns its socket, or `nil` when there is none.
    mutating func shedOldest(sparing: UInt, among kinds: Set<Kind> = [.api]) -> Int32? {
        var oldest: (UInt, Double)?
        for (id, e) in entries where id != sparing && !e.shed && Self.sheddable(e.phase) && kinds.contains(e.kind) {
            if oldest == nil || e.since < oldest!.1 { oldest = (id, e.since) }
        }
        guard let (id, _) = oldest else { return nil }
        return shed(id)
    }

    /// Marks a connection the server is closing for another reason (an answer it wrote itself)
    /// as shed; returns its socket, or `nil` when it was already closing.
    mutating func closing(_ id: UInt) -> Int32? { shed(id) }

    /// Marks every connection past its deadline as shed; returns their sockets and why.
    mutating func overdue(now: Double) -> [(fd: Int32, reason: ShedReason)] {
        var late: [(UInt, ShedReason)] = []
        for (id, e) in entries where !e.shed && Self.sheddable(e.phase) {
            guard let deadline = e.deadline, deadline <= now else { continue }
            switch e.phase {
            case .body: late.append((id, .bodyTimeout))
            case .waiting where e.reused: late.append((id, .idleTimeout))
            default: late.append((id, .headerTimeout))
            }
        }
        return late.compactMap { id, reason in shed(id).map { ($0, reason) } }
    }

    /// The connections whose request's headers are not complete yet (as far as the table knows).
    var receivingHeaders: [(id: UInt, fd: Int32)] {
        entries.compactMap { id, e in (e.phase == .waiting || e.phase == .headers) && !e.shed ? (id, e.fd) : nil }
    }

    private static func sheddable(_ phase: Phase) -> Bool { phase == .waiting || phase == .headers || phase == .body }

    private mutating func shed(_ id: UInt) -> Int32? {
        guard var e = entries[id], !e.shed else { return nil }
        e.shed = true
        if e.kind == .api { apiConnections -= 1 }
        entries[id] = e
        shedPending += 1
        return e.fd
    }

    /// Sets a live entry's kind, keeping ``apiConnections`` true.
    private mutating func setKind(_ e: inout Entry, _ kind: Kind) {
        guard e.kind != kind else { return }
        if !e.shed {
            if e.kind == .api { apiConnections -= 1 }
            if kind == .api { apiConnections += 1 }
        }
        e.kind = kind
    }

    private mutating func release(_ peer: Peer) {
        let n = perAddress[peer, default: 0] - 1
        if n <= 0 { perAddress[peer] = nil } else { perAddress[peer] = n }
    }
}
