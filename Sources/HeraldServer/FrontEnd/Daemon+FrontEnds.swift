import FoundationEssentials
import HeraldCore

/// Front ends' own listeners (`matrix.listen`): a second libmicrohttpd server per front end
/// that asks for one, serving only that front end, bounded by its body limit and the daemon's
/// connection limits.
extension Daemon {
    /// Starts the listeners the front ends ask for and records them in the running state.
    /// - Throws: ``HTTPServerError`` naming the front end's setting when it cannot listen.
    func startFrontEndListeners(_ config: HeraldConfiguration, api: API) throws(HTTPServerError) {
        for frontEnd in api.frontEnds {
            guard let listener = frontEnd.listener(config) else { continue }
            let name = type(of: frontEnd).name, title = type(of: frontEnd).title
            var serverOptions = HTTPServer.Options(config.server, maxBodyBytes: listener.maxBodyBytes, maxStreams: 0)
            serverOptions.answeredByServer = { api.recordServerAnswer(method: $0, path: $1, status: $2) }
            let server = HTTPServer(options: serverOptions, logger: logger, metrics: metrics,
                                    immediate: { api.immediate($0, frontEnd: frontEnd, ownListener: true) },
                                    handler: { await api.handle($0, frontEnd: frontEnd, ownListener: true) })
            let port = try server.start(listener.address, setting: listener.setting)
            running.withLock { $0?.frontEndServers[name] = server }
            let address = ListenAddress(host: listener.address.host, port: port)
            logger.notice("\(title) listening", ["front_end": name, "address": address.description])
            if options.announce {
                FileDescriptorOutput.standardOutput("herald: \(title) listening on \(address)\n")
            }
        }
    }

    /// The port of a front end's own listener (`nil` when it has none).
    public func port(of frontEnd: String) -> Int? { running.withLock { $0?.frontEndServers[frontEnd]?.port } }
}
