import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension HeraldClient {
    // MARK: The connection loop

    func readLoop() async {
        var attempt = 0
        while !Task.isCancelled {
            shared.withLock { $0.status = .connecting(attempt: attempt) }
            onEvent(.connecting(attempt: attempt))
            var failure: HeraldClientError?
            // A token kept from before may have expired meanwhile: refused, it is replaced and
            // tried again at once; a token just given by the provider and refused backs off.
            let cached = shared.withLock { $0.token != nil }
            do {
                let token = try await currentToken()
                let (connected, error) = await runConnection(token: token)
                if connected { attempt = 0 }
                failure = error
            } catch {
                failure = error
            }
            if Task.isCancelled { break }
            var retryAfter: Duration?
            switch failure {
            case .unauthorized?:
                shared.withLock { $0.token = nil }
                if cached {
                    onEvent(.dropped(failure))
                    continue
                }
            case .http(_, _, _, let seconds?)?: retryAfter = .seconds(seconds)
            default: break
            }
            onEvent(.dropped(failure))
            let serverRetry = shared.withLock { $0.serverRetry }
            let delay = configuration.reconnect.delay(attempt: attempt, serverRetry: serverRetry, retryAfter: retryAfter, random: random())
            shared.withLock { $0.status = .waiting(attempt: attempt, delay: delay) }
            onEvent(.waiting(attempt: attempt, delay: delay))
            do { try await sleep(delay) } catch { break }
            attempt += 1
        }
    }

    /// The cached client token, or a new one from the provider. A token for another user or
    /// device than the saved state's forgets the saved last event id (ids are per user).
    func currentToken() async throws(HeraldClientError) -> String {
        if let token = shared.withLock({ $0.token }) {
            // One that has expired (its `exp`, read without verifying) is not worth a refusal.
            guard let expiry = ClientTokenPeek.expiry(of: token), expiry.timeIntervalSinceNow < 5 else { return token }
            shared.withLock { s in if s.token == token { s.token = nil } }
        }
        let token: String
        do { token = try await tokenProvider() } catch {
            throw .tokenProvider(String(describing: error))
        }
        let owner = ClientTokenPeek.owner(of: token)
        shared.withLock { s in
            s.token = token
            guard let owner, s.persisted.owner != owner else { return }
            if s.persisted.owner != nil {
                s.persisted.lastEventID = nil
                s.pendingAck = nil
                s.acked = nil
            }
            s.persisted.owner = owner
            s.dirty = true
        }
        return token
    }

    /// One connection: opens the stream, reads it until it ends, fails or the task is cancelled,
    /// then closes it (awaited: the socket is closed on return).
    /// - Returns: whether the stream was established (200), and why it ended (`nil`: a clean end
    ///   or a cancellation).
    private func runConnection(token: String) async -> (connected: Bool, error: HeraldClientError?) {
        let lastEventID = shared.withLock { $0.persisted.lastEventID }
        var request = URLRequest(url: endpoint("/v1/stream", query: [("app", configuration.app), ("ack", "1")]))
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("text/event-stream", forHTTPHeaderField: "Accept")
        request.setValue("no-cache", forHTTPHeaderField: "Cache-Control")
        if let lastEventID, !lastEventID.isEmpty { request.setValue(lastEventID, forHTTPHeaderField: "Last-Event-ID") }
        let connection = makeStreamConnection(request: request, idleTimeout: ReconnectPolicy.seconds(configuration.idleTimeout))
        connection.start()
        var parser = ServerSentEventParser(lastEventID: lastEventID ?? "")
        var status = 0, headers: [String: String] = [:], body = Data()
        var connected = false
        var failure: HeraldClientError?
        do {
            for try await piece in connection.pieces {
                switch piece {
                case .response(let code, let h):
                    status = code
                    headers = h
                    let type = (h["content-type"] ?? "").split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                    if code == 200 && type == "text/event-stream" {
                        connected = true
                        shared.withLock { s in
                            s.status = .connected
                            // What the last connection read may not have been acknowledged yet.
                            if let n = Self.eventNumber(lastEventID), s.acked != n { s.pendingAck = n }
                        }
                        onEvent(.connected(lastEventID: lastEventID))
                        signalAck()
                    }
                case .bytes(let data):
                    if connected {
                        handle(parser.feed(data), lastEventID: parser.lastEventID)
                    } else if body.count < 65_536 {
                        body.append(data)
                    }
                }
                if !connected && status == 200 {
                    let type = headers["content-type"] ?? "none"
                    failure = .http(status: 200, code: nil, message: "expected Content-Type text/event-stream, found \(type)", retryAfter: nil)
                    break
                }
            }
            if failure == nil && !connected && !Task.isCancelled {
                failure = Self.httpError(status: status, headers: headers, body: body)
            }
        } catch {
            if !Task.isCancelled { failure = (error as? HeraldClientError) ?? .transport(String(describing: error)) }
        }
        await connection.close()
        return (connected, failure)
    }

    /// What one read of the stream completed.
    private func handle(_ outputs: [ServerSentEventParser.Output], lastEventID: String) {
        for item in outputs {
            switch item {
            case .retry(let ms):
                shared.withLock { $0.serverRetry = .milliseconds(ms) }
            case .comment:
                break
            case .event(let event):
                guard event.type == "notification" else { continue }
                let number = Self.eventNumber(event.lastEventID)
                let notification: HeraldNotification
                do { notification = try HeraldNotification.decode(event.data, eventID: number) } catch {
                    onEvent(.invalidEvent(error))
                    continue
                }
                let new = shared.withLock { s in record(notification.id, in: &s) }
                if new {
                    // Reported before it is handed over: whoever the app's iteration wakes sees the event already.
                    onEvent(.received(notification))
                    deliver(notification)
                } else {
                    onEvent(.duplicate(notificationID: notification.id, eventID: number))
                }
            }
        }
        // Everything read so far was handed over: that is what the acknowledgement covers.
        // An empty last event ID string means none (no `Last-Event-ID` on reconnect).
        let current: String? = lastEventID.isEmpty ? nil : lastEventID
        let changed: Bool = shared.withLock { s in
            guard s.persisted.lastEventID != current else { return false }
            s.persisted.lastEventID = current
            s.dirty = true
            if let n = Self.eventNumber(lastEventID) { s.pendingAck = n }
            return true
        }
        if changed { signalAck() }
    }

    private func deliver(_ notification: HeraldNotification) {
        outlet.withLock { o in
            if let current = o.current, case .enqueued = current.yield(notification) { return }
            o.current = nil
            o.queued.append(notification)
        }
    }

    func signalAck() { _ = shared.withLock { $0.ackSignal }?.yield(()) }

    // MARK: Helpers

    /// `server` + `path` (after the server URL's own path) + the query, percent-encoded strictly.
    func endpoint(_ path: String, query: [(String, String)]) -> URL {
        var base = configuration.server.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let allowed = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let q = query.map { k, v in "\(k)=\(v.addingPercentEncoding(withAllowedCharacters: allowed) ?? v)" }.joined(separator: "&")
        return URL(string: base + path + (q.isEmpty ? "" : "?" + q))!
    }

    /// An event id Herald numbered (ASCII digits only), as acknowledgements carry it.
    static func eventNumber(_ id: String?) -> Int64? {
        guard let id, !id.isEmpty, id.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int64(id)
    }

    /// The error an API answer carries (`{"error": {"code", "message"}}`).
    static func httpError(status: Int, headers: [String: String], body: Data) -> HeraldClientError {
        var code: String?, message = String(decoding: body.prefix(512), as: UTF8.self)
        if let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
           let error = object["error"] as? [String: Any] {
            code = error["code"] as? String
            message = (error["message"] as? String) ?? message
        }
        if status == 0 { return .transport("no HTTP answer") }
        if status == 401 { return .unauthorized(message) }
        let retryAfter = headers["retry-after"].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        return .http(status: status, code: code, message: message.isEmpty ? "HTTP \(status)" : message, retryAfter: retryAfter)
    }
}
