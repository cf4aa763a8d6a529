import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension HeraldClient {
    // MARK: Acknowledgements

    /// Sends `POST /v1/stream/ack` with the latest id read each time it is woken (so a burst
    /// costs one request per round trip, not one per event); the state is saved before each.
    /// Ends when `signals` finishes (``disconnect()``), after sending what is still due.
    func acknowledge(_ signals: AsyncStream<Void>, generation: Int) async {
        var failures = 0
        for await _ in signals {
            while true {
                let target: Int64? = shared.withLock { s in
                    guard let p = s.pendingAck, p != s.acked else { return nil }
                    return p
                }
                guard let target else { break }
                save()
                do {
                    try await postAck(target)
                    failures = 0
                    shared.withLock { s in s.acked = target }
                    onEvent(.acknowledged(eventID: target))
                } catch {
                    onEvent(.acknowledgementFailed(eventID: target, error))
                    if case .unauthorized = error { shared.withLock { $0.token = nil } }
                    if case .http(let status, _, _, _) = error, (400..<500).contains(status), status != 408, status != 429 {
                        // Herald refuses this acknowledgement for good (e.g. a server without
                        // acknowledgements answers 404): wait for the next event, don't loop.
                        break
                    }
                    // Wait before trying again, unless disconnecting (checked and noted under
                    // one lock, so disconnect() either stops this loop here or cancels the wait).
                    let stopping = shared.withLock { s in
                        if s.stoppedGeneration >= generation { return true }
                        s.ackWaiting = true
                        return false
                    }
                    if stopping || Task.isCancelled { return }
                    let delay = configuration.reconnect.delay(attempt: failures, serverRetry: nil, random: random())
                    failures += 1
                    let slept: Bool
                    do { try await sleep(delay); slept = true } catch { slept = false }
                    shared.withLock { $0.ackWaiting = false }
                    if !slept { return }
                }
            }
        }
    }

    private func postAck(_ id: Int64) async throws(HeraldClientError) {
        let token = try await currentToken()
        var request = URLRequest(url: endpoint("/v1/stream/ack", query: [("app", configuration.app)]))
        request.httpMethod = "POST"
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(#"{"id":\#(id)}"#.utf8)
        request.timeoutInterval = ReconnectPolicy.seconds(configuration.requestTimeout)
        let data: Data, response: URLResponse
        do { (data, response) = try await ackSession.data(for: request) } catch {
            throw .transport(HeraldClientError.describe(urlError: error))
        }
        let http = response as? HTTPURLResponse
        let status = http?.statusCode ?? 0
        guard !(200..<300).contains(status) else { return }
        var headers: [String: String] = [:]
        for (k, v) in http?.allHeaderFields ?? [:] {
            if let k = k as? String, let v = v as? String { headers[k.lowercased()] = v }
        }
        throw Self.httpError(status: status, headers: headers, body: data)
    }
}
