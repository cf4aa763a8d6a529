import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One `GET /v1/stream` request through a `URLSession` of its own whose delegate hands the body
/// on as it arrives (on Linux, FoundationNetworking drives libcurl and delivers each read at
/// once; measured: an event reaches the delegate within a millisecond of being written, and a
/// cancel closes the socket within a millisecond).
///
/// `@unchecked Sendable`: the mutable state is behind a lock; the session and task are set in
/// `init` and used only by the owner (`start()`, then `close()` once), never by the delegate.
final class EventStreamConnection: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// What the connection produces: the response head first, then the body's pieces.
    enum Piece: Sendable {
        case response(status: Int, headers: [String: String])
        case bytes(Data)
    }

    let pieces: AsyncThrowingStream<Piece, any Error>
    private let continuation: AsyncThrowingStream<Piece, any Error>.Continuation
    private struct State {
        var completed = false
        var sentResponse = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Locked(State())
    /// Set in `init`, cleared by `close()` (which only the owner calls, once).
    private var session: URLSession?
    private var task: URLSessionDataTask?

    /// - Parameter idleTimeout: the longest silence (no byte, not even a heartbeat) before the
    ///   connection counts as dead.
    init(request: URLRequest, idleTimeout: TimeInterval) {
        (pieces, continuation) = AsyncThrowingStream.makeStream(of: Piece.self, throwing: (any Error).self, bufferingPolicy: .unbounded)
        super.init()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = idleTimeout
        configuration.timeoutIntervalForResource = 365 * 24 * 3600
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = 1
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.name = "herald.client.stream"
        let session = URLSession(configuration: configuration, delegate: self, delegateQueue: queue)
        self.session = session
        task = session.dataTask(with: request)
    }

    /// Sends the request.
    func start() { task?.resume() }

    /// Cancels the request and returns once the session reported the task finished (the socket
    /// is closed by then), then lets the session go.
    func close() async {
        task?.cancel()
        // Invalidated at once too: on Linux an idle session can hold its connection open after
        // the task is cancelled, and the server must see the close now.
        session?.invalidateAndCancel()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let done: Bool = state.withLock { s in
                if s.completed { return true }
                s.waiters.append(c)
                return false
            }
            if done { c.resume() }
        }
        // The session keeps its delegate until it is invalidated.
        session?.finishTasksAndInvalidate()
        session = nil
        task = nil
    }

    // MARK: URLSessionDataDelegate

    // The response head is taken from the task when the first bytes (or the end) arrive, not
    // from `didReceive response:`, whose completion handler is `@Sendable` in Apple's SDKs and
    // not in FoundationNetworking: one signature could silently miss the other's requirement.

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        yieldResponse(dataTask.response)
        continuation.yield(.bytes(data))
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        if error == nil { yieldResponse(task.response) }
        if let error {
            continuation.finish(throwing: HeraldClientError.transport(Self.describe(error)))
        } else {
            continuation.finish()
        }
        let waiting: [CheckedContinuation<Void, Never>] = state.withLock { s in
            s.completed = true
            defer { s.waiters = [] }
            return s.waiters
        }
        waiting.forEach { $0.resume() }
    }

    private func yieldResponse(_ response: URLResponse?) {
        let first: Bool = state.withLock { s in
            defer { s.sentResponse = true }
            return !s.sentResponse
        }
        guard first else { return }
        let http = response as? HTTPURLResponse
        var headers: [String: String] = [:]
        for (k, v) in http?.allHeaderFields ?? [:] {
            if let k = k as? String, let v = v as? String { headers[k.lowercased()] = v }
        }
        continuation.yield(.response(status: http?.statusCode ?? 0, headers: headers))
    }

    /// A URL error without its user info (which holds the URL, and so the app id only; never the token).
    static func describe(_ error: any Error) -> String {
        let ns = error as NSError
        guard ns.domain == NSURLErrorDomain else { return String(describing: error) }
        let known: String?
        switch URLError.Code(rawValue: ns.code) {
        case .timedOut: known = "timed out (no byte within the timeout)"
        case .cannotConnectToHost: known = "cannot connect to the server"
        case .networkConnectionLost: known = "the connection was lost"
        case .notConnectedToInternet: known = "not connected to the internet"
        case .cannotFindHost, .dnsLookupFailed: known = "cannot find the server's host"
        case .secureConnectionFailed, .serverCertificateUntrusted, .serverCertificateHasBadDate,
             .serverCertificateNotYetValid, .serverCertificateHasUnknownRoot: known = "TLS failed"
        case .cancelled: known = "cancelled"
        default: known = nil
        }
        let detail = ns.userInfo[NSLocalizedDescriptionKey] as? String
        let reason = [known, detail].compactMap { $0 }.joined(separator: ": ")
        return "\(reason.isEmpty ? "error" : reason) (NSURLError \(ns.code))"
    }
}
