import FoundationEssentials
import Glibc
import HeraldCore
import HeraldMatrix

/// The Matrix gateway's own listener (`matrix.listen`): a second libmicrohttpd server that
/// serves only `/_matrix/…`, bounded by `matrix.maxBodyBytes` and the daemon's connection limits.
extension Daemon {
    /// Starts the listener when `matrix.listen` is set and records it in the running state.
    /// - Throws: ``HTTPServerError`` naming `matrix.listen` when it cannot listen.
    func startMatrixListener(_ config: HeraldConfiguration, api: API) throws(HTTPServerError) {
        guard let matrix = config.section(MatrixConfiguration.self), let listen = matrix.listen else { return }
        var serverOptions = HTTPServer.Options(config.server, maxBodyBytes: matrix.maxBodyBytes, maxStreams: 0)
        serverOptions.answeredByServer = { api.recordServerAnswer(method: $0, path: $1, status: $2) }
        let server = HTTPServer(options: serverOptions,
                                logger: logger, metrics: metrics,
                                immediate: { api.matrixImmediate($0, ownListener: true) },
                                handler: { await api.matrixHandle($0, ownListener: true) })
        let port = try server.start(listen, setting: "matrix.listen")
        running.withLock { $0?.matrixServer = server }
        let address = ListenAddress(host: listen.host, port: port)
        logger.notice("Matrix push gateway listening", ["address": address.description, "app_ids": matrix.apps.keys.sorted().joined(separator: ",")])
        if options.announce {
            FileDescriptorOutput.standardOutput("herald: matrix gateway listening on \(address)\n")
        }
    }

    /// The port of the Matrix gateway's own listener (`nil` without `matrix.listen`).
    public var matrixPort: Int? { running.withLock { $0?.matrixServer?.port } }

    /// Matrix settings a reload cannot apply.
    static func matrixRestartReasons(old: HeraldConfiguration, new: HeraldConfiguration) -> [String] {
        let a = old.section(MatrixConfiguration.self), b = new.section(MatrixConfiguration.self)
        if a?.listen != b?.listen, a?.listen != nil || b?.listen != nil {
            return ["matrix.listen changed (\(a?.listen?.description ?? "none") → \(b?.listen?.description ?? "none")): restart to apply"]
        }
        if a?.listen != nil, a?.maxBodyBytes != b?.maxBodyBytes {
            return ["matrix.maxBodyBytes changed while matrix.listen is set: restart to apply"]
        }
        return []
    }
}
