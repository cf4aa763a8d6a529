internal import CMicroHTTPD
import FoundationEssentials
import HeraldCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a streaming response does after its headers: see ``HTTPResponse/stream(status:headers:heartbeat:closing:open:)``.
public struct HTTPStreamBody: Sendable {
    /// Bytes the server writes to the stream every `interval` seconds; a write that fails
    /// closes the stream. A client that closes (FIN or RST) is seen at once without it (the
    /// registry's ``HangUpWatcher``); the heartbeat finds peers that vanished silently (a
    /// network that went away) and keeps proxies from closing idle streams.
    public var heartbeat: (interval: TimeInterval, bytes: [UInt8])?
    /// The last bytes sent when the server stops, before the stream ends cleanly.
    public var closing: [UInt8]
    /// Called once the response is queued, on the server's thread: keep it quick (register the
    /// stream, queue the first bytes).
    public var open: @Sendable (HTTPStream) -> Void
}

extension HTTPResponse {
    /// A response whose body is written over time through an ``HTTPStream`` (chunked on HTTP/1.1).
    ///
    /// - Parameters:
    ///   - heartbeat: bytes the server writes every `interval` seconds; it finds peers that
    ///     vanished without a FIN or RST (streams have no idle timeout; closes are seen at once).
    ///   - closing: the final bytes every open stream gets when the server stops.
    ///   - open: called with the stream once the headers are queued (on the server thread).
    public static func stream(status: Int = 200, headers: [(String, String)] = [],
                              heartbeat: (interval: TimeInterval, bytes: [UInt8])?, closing: [UInt8] = [],
                              open: @escaping @Sendable (HTTPStream) -> Void) -> HTTPResponse {
        var response = HTTPResponse(status: status, headers: headers)
        response.streamBody = HTTPStreamBody(heartbeat: heartbeat, closing: closing, open: open)
        return response
    }

    /// A `text/event-stream` response (Server-Sent Events) with a comment heartbeat
    /// (`: heartbeat`) every `heartbeat` seconds and `: server shutting down` when the server stops.
    public static func eventStream(headers: [(String, String)] = [], heartbeat: TimeInterval = 15,
                                   open: @escaping @Sendable (HTTPStream) -> Void) -> HTTPResponse {
        stream(status: 200,
               headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")] + headers,
               heartbeat: (heartbeat, Array(": heartbeat\n\n".utf8)), closing: Array(": server shutting down\n\n".utf8), open: open)
    }
}

/// One open streaming response. ``write(_:)`` is thread-safe: it queues bytes that the server
/// thread sends as the client reads them. (`@unchecked Sendable`: the connection pointer is used
/// only under the state lock, and only until the connection releases the stream.)
///
/// - Important: a stream holds at most the server's `streamBufferBytes` of unsent bytes; a
///   write past that bound closes the stream (``CloseReason/overflow``): a client that stops
///   reading is disconnected instead of growing the daemon's memory.
public final class HTTPStream: @unchecked Sendable {
    /// Why a stream ended; ``onClose(_:)`` receives it exactly once.
    public enum CloseReason: String, Sendable {
        /// The client went away: its socket hung up (FIN or RST, seen at once by the registry's
        /// watcher) or a write failed.
        case clientGone = "client_gone"
        /// The client did not read fast enough: the unsent bytes passed the bound.
        case overflow
        /// ``finish(final:)`` was called and the end of the stream was sent.
        case finished
        /// The server stopped (the stream got its closing bytes first when the client read them).
        case serverStopping = "server_stopping"
    }

    /// Identifies the stream (stable while it lives).
    public var id: ObjectIdentifier { ObjectIdentifier(self) }

    /// The body's heartbeat and closing bytes (not its `open`, which ran once: what it captured
    /// is let go).
    let heartbeat: (interval: TimeInterval, bytes: [UInt8])?
    let closing: [UInt8]
    let registry: StreamRegistry
    private let connection: OpaquePointer
    private let limit: Int
    private let state = Mutex(State())

    private struct State: ~Copyable {
        var pending: [UInt8] = []
        var sent = 0
        /// The connection is suspended by the reader (nothing to send); a write resumes it.
        var suspended = false
        /// Set once: the stream accepts no more writes.
        var ending: CloseReason?
        /// The connection is gone (the release callback ran): no more resumes or shutdowns.
        var released = false
        var onClose: (@Sendable (CloseReason) -> Void)?
        var closedReason: CloseReason?
        var onDrained: (@Sendable () -> Void)?
    }

    /// Keeps nothing of the request: a stream lives for hours, and its memory is per client.
    init(body: HTTPStreamBody, connection: OpaquePointer, limit: Int, registry: StreamRegistry) {
        heartbeat = body.heartbeat
        closing = body.closing
        self.registry = registry
        self.connection = connection
        self.limit = limit
    }

    /// Bytes queued and not yet sent to the client.
    public var unsentBytes: Int { state.withLock { $0.pending.count - $0.sent } }

    /// The most unsent bytes the stream holds before it disconnects its client.
    public var bufferLimit: Int { limit }

    /// Whether the stream still accepts writes.
    public var isOpen: Bool { state.withLock { $0.ending == nil } }

    /// Queues `bytes` for the client. - Returns: false when the stream is closed, or when this
    /// write passed the buffer bound (the stream is then closed with ``CloseReason/overflow``).
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        if bytes.isEmpty { return isOpen }
        return state.withLock { s in
            guard s.ending == nil, !s.released else { return false }
            if s.pending.count - s.sent + bytes.count > limit {
                s.ending = .overflow
                s.pending = []
                s.sent = 0
                abortConnection(&s)
                return false
            }
            if s.sent > 0 && s.sent == s.pending.count {
                s.pending.removeAll(keepingCapacity: true)
                s.sent = 0
            }
            s.pending.append(contentsOf: bytes)
            wake(&s)
            return true
        }
    }

    /// Sends `final` (past the buffer bound if need be), then ends the stream cleanly (the chunked
    /// terminator on HTTP/1.1). Does nothing on a stream already ending.
    public func finish(final: [UInt8] = []) { end(final: final, reason: .finished) }

    /// Registers what runs when the stream ends, once, with the reason; runs it at once when the
    /// stream has already ended. A later registration replaces an earlier one.
    public func onClose(_ handler: @escaping @Sendable (CloseReason) -> Void) {
        let reason: CloseReason? = state.withLock { s in
            if let r = s.closedReason { return r }
            s.onClose = handler
            return nil
        }
        if let reason { handler(reason) }
    }

    /// Runs `body` once when every queued byte has been taken by the server thread (at once,
    /// on the caller's thread, when nothing is queued; else on the server thread): lets a caller
    /// write a backlog larger than the bound (a replay) in pieces. Never runs on a closed stream.
    public func whenDrained(_ body: @escaping @Sendable () -> Void) {
        let now: Bool = state.withLock { s in
            guard s.ending == nil, !s.released else { return false }
            if s.pending.count == s.sent { return true }
            s.onDrained = body
            return false
        }
        if now { body() }
    }

    // MARK: Server side

    /// Ends the stream with `final` bytes and `reason` (finish, or the server stopping).
    func end(final: [UInt8], reason: CloseReason) {
        state.withLock { s in
            guard s.ending == nil, !s.released else { return }
            s.ending = reason
            s.pending.append(contentsOf: final)
            wake(&s)
        }
    }

    /// Closes the connection without a clean end (the server is about to stop the daemon).
    func abort(reason: CloseReason) {
        state.withLock { s in
            guard !s.released else { return }
            if s.ending == nil { s.ending = reason }
            s.pending = []
            s.sent = 0
            abortConnection(&s)
        }
    }

    /// The content reader, on the server thread: copies queued bytes, or suspends the connection
    /// when there is nothing to send (a write resumes it); -1 ends cleanly, -2 closes at once.
    func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        var drained: (@Sendable () -> Void)?
        defer { drained?() }
        return state.withLock { s in
            let available = s.pending.count - s.sent
            if available > 0 {
                let n = Swift.min(available, max)
                s.pending.withUnsafeBytes { raw in
                    UnsafeMutableRawPointer(buffer).copyMemory(from: raw.baseAddress! + s.sent, byteCount: n)
                }
                s.sent += n
                if s.sent == s.pending.count {
                    // Drained: give the memory back (idle streams must stay small).
                    s.pending = []
                    s.sent = 0
                    if s.ending == nil {
                        drained = s.onDrained
                        s.onDrained = nil
                    }
                }
                return n
            }
            switch s.ending {
            case .finished?, .serverStopping?: return -1
            case .overflow?, .clientGone?: return -2
            case nil:
                s.suspended = true
                herald_mhd_suspend(connection)
                return 0
            }
        }
    }

    /// The client hung up (the registry's watcher saw FIN or RST on the socket, which a
    /// suspended connection does not notice): no more writes, ``onClose(_:)`` runs now with
    /// ``CloseReason/clientGone``, and the connection is cut and resumed so that the server
    /// thread closes it and frees its slot.
    ///
    /// A stream the server already cut (``CloseReason/overflow``, or an abort while stopping) keeps
    /// that reason: the cut shuts the socket down, which the watcher sees as a hang-up too.
    func hungUp() {
        let (reason, handler): (CloseReason, (@Sendable (CloseReason) -> Void)?) = state.withLock { s in
            guard !s.released, s.closedReason == nil else { return (.clientGone, nil) }
            let reason: CloseReason
            switch s.ending {
            case .overflow?: reason = .overflow
            case .serverStopping?: reason = .serverStopping
            default: reason = .clientGone
            }
            s.ending = reason
            s.closedReason = reason
            let handler = s.onClose
            s.onClose = nil
            s.onDrained = nil
            s.pending = []
            s.sent = 0
            abortConnection(&s)
            return (reason, handler)
        }
        handler?(reason)
    }

    /// The connection is done with the stream (server thread, before its socket closes).
    /// - Returns: the handler to run with the reason, outside any lock (none when the hang-up
    ///   watcher already ran it).
    func released() -> (CloseReason, (@Sendable (CloseReason) -> Void)?) {
        state.withLock { s in
            s.released = true
            if let early = s.closedReason {
                s.onDrained = nil
                s.pending = []
                return (early, nil)
            }
            let reason: CloseReason
            switch s.ending {
            case .finished? where s.pending.count == s.sent: reason = .finished
            case .serverStopping?: reason = .serverStopping
            case .overflow?: reason = .overflow
            default: reason = .clientGone
            }
            s.ending = s.ending ?? reason
            s.closedReason = reason
            let handler = s.onClose
            s.onClose = nil
            s.onDrained = nil
            s.pending = []
            return (reason, handler)
        }
    }

    /// The connection's socket, or -1 (valid until the connection releases the stream).
    var socket: Int32 { state.withLock { s in s.released ? -1 : herald_mhd_connection_fd(connection) } }

    private func wake(_ s: inout State) {
        if s.suspended {
            s.suspended = false
            herald_mhd_resume(connection)
        }
    }

    /// Shuts the socket down so that the server thread closes the connection even when it is
    /// blocked on a client that does not read; resumes it if suspended. Only while the
    /// connection lives (its socket is closed after the release callback).
    private func abortConnection(_ s: inout State) {
        guard !s.released else { return }
        let fd = herald_mhd_connection_fd(connection)
        if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) }
        wake(&s)
    }
}
