import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a stream connection produces: the response head first, then the body's pieces.
enum StreamPiece: Sendable {
    case response(status: Int, headers: [String: String])
    case bytes(Data)
}

/// One `GET /v1/stream` request and its response, read as it arrives.
protocol StreamConnection: Sendable {
    /// The response head, then the body's pieces; ends with the response (or ``close()``), or
    /// throws ``HeraldClientError/transport(_:)`` when the connection broke.
    var pieces: AsyncThrowingStream<StreamPiece, any Error> { get }
    /// Sends the request.
    func start()
    /// Closes the connection and returns once its socket is closed. Called once, by the owner.
    func close() async
}

/// The stream connection for `request`: on Linux, over `http`, a socket of its own
/// (``SocketStreamConnection``); otherwise `URLSession` (``URLSessionStreamConnection``).
func makeStreamConnection(request: URLRequest, idleTimeout: TimeInterval) -> any StreamConnection {
    #if os(Linux)
    if SocketStreamConnection.serves(request) { return SocketStreamConnection(request: request, idleTimeout: idleTimeout) }
    #endif
    return URLSessionStreamConnection(request: request, idleTimeout: idleTimeout)
}

/// One `GET /v1/stream` request through a `URLSession` of its own whose delegate hands the body
/// on as it arrives (Apple platforms, and `https` on Linux).
///
/// - Important: on Linux, FoundationNetworking (libcurl) sometimes kept the socket of a
///   cancelled task open while other sessions opened and closed in the process; plain `http`
///   streams there use ``SocketStreamConnection`` instead.
///
/// `@unchecked Sendable`: the mutable state is behind a lock; the session and task are set in
/// `init` and used only by the owner (`start()`, then `close()` once), never by the delegate.
final class URLSessionStreamConnection: NSObject, URLSessionDataDelegate, StreamConnection, @unchecked Sendable {
    typealias Piece = StreamPiece

    let pieces: AsyncThrowingStream<Piece, any Error>
    private let continuation: AsyncThrowingStream<Piece, any Error>.Continuation
    private struct State {
        var sentResponse = false
    }
    private let state = Locked(State())
    /// Opens when the session reported the task finished.
    private let completed = Latch()
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
        await completed.wait()
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
            continuation.finish(throwing: HeraldClientError.transport(HeraldClientError.describe(urlError: error)))
        } else {
            continuation.finish()
        }
        completed.open()
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
}

extension HeraldClientError {
    /// A URL error without its user info (which holds the URL, and so the app id only; never the token).
    static func describe(urlError error: any Error) -> String {
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
