import Foundation
import HeraldCore
import HeraldHTTP2
import HeraldTestKit

/// Real servers for the client's tests, on 127.0.0.1 port 0 over TLS with the shared test certificates.
enum Servers {
    /// The port a child process listens on, from its sockets in `/proc` (for servers that bind
    /// port 0 and do not print the port, such as nghttpd).
    static func listeningPort(pid: Int32, timeout: TimeInterval = 30) async -> Int? {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let port = listeningPortNow(pid: pid) { return port }
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        return nil
    }

    private static func listeningPortNow(pid: Int32) -> Int? {
        guard let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return nil }
        var inodes = Set<String>()
        for fd in fds {
            if let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"), link.hasPrefix("socket:[") {
                inodes.insert(String(link.dropFirst(8).dropLast()))
            }
        }
        guard let table = try? String(contentsOfFile: "/proc/\(pid)/net/tcp", encoding: .utf8) else { return nil }
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            guard fields.count > 9, fields[3] == "0A", inodes.contains(String(fields[9])),
                  let colon = fields[1].lastIndex(of: ":"), let port = Int(fields[1][fields[1].index(after: colon)...], radix: 16)
            else { continue }
            return port
        }
        return nil
    }

    /// A client configuration for `port` on 127.0.0.1 that trusts the test CA.
    static func configuration(port: Int, engine: HTTP2Engine, certs: TestCertificates) -> HTTP2ClientConfiguration {
        var c = HTTP2ClientConfiguration(host: "127.0.0.1", port: port)
        c.caFile = certs.caFile
        c.engine = engine
        c.timeout = 10
        return c
    }

    static func client(_ c: HTTP2ClientConfiguration, hooks: (any HTTP2RequestHooks)? = nil,
                       metrics: MetricsRegistry = MetricsRegistry()) throws -> HTTP2Client {
        let client = try HTTP2Client(configuration: c, hooks: hooks, name: "test", logger: .disabled, metrics: metrics)
        try client.start()
        return client
    }
}

/// A server process for a test, with its temporary folder; ``stop()`` ends both.
final class ServerProcess: Sendable {
    let process: ChildProcess
    let port: Int
    let directory: TemporaryDirectory

    /// Starts `executable` and waits for its port (`port(process)`); cleans up and throws when none comes.
    init(_ executable: String, _ arguments: [String], directory: TemporaryDirectory, what: String,
         port: (ChildProcess) async -> Int?) async throws {
        let process: ChildProcess
        do { process = try ChildProcess(executable, arguments) } catch { directory.remove(); throw error }
        guard let found = await port(process) else {
            process.terminate()
            directory.remove()
            throw TestSetupError("\(what) did not start: \(process.stderr)")
        }
        self.process = process
        self.port = found
        self.directory = directory
    }

    func stop() {
        process.terminate()
        directory.remove()
    }
}

/// nghttpd (Debian's nghttp2-server) with `--echo-upload`: a POST to a path whose file exists in
/// its htdocs is answered 200 with the uploaded body.
enum NGHTTPD {
    /// Paths that exist (a POST elsewhere is answered 404).
    static let paths = ["echo", "other"]

    static func start() async throws -> ServerProcess {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nghttpd") else {
            throw TestSetupError("nghttpd is missing: run scripts/bootstrap.sh (Debian package nghttp2-server)")
        }
        let certs = try TestCertificates.shared()
        let directory = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("htdocs"), withIntermediateDirectories: true)
        for path in Self.paths { try Data("file \(path)\n".utf8).write(to: URL(fileURLWithPath: directory.file("htdocs/\(path)"))) }
        // A port picked here and probed by connecting: reading it back from /proc under load (a
        // long socket table) missed it often enough to fail the suite.
        let port = try Loopback.freePort()
        return try await ServerProcess("/usr/sbin/nghttpd", ["--address=127.0.0.1", "--echo-upload", "-d", directory.file("htdocs"),
                                                             String(port), certs.serverKey, certs.serverCertificate],
                                       directory: directory, what: "nghttpd") { process in
            let end = Date().addingTimeInterval(60)
            while Date() < end, process.isRunning {
                if let fd = try? Loopback.connect(port: port) {
                    close(fd)
                    return port
                }
                try? await Task.sleep(nanoseconds: 20_000_000)
            }
            return nil
        }
    }
}

/// CPython's `http.server` over TLS whose ALPN offers only `http/1.1` (as some Web Push services
/// do): POST answers 201 after `delay` seconds with the body echoed and the client's port in
/// `x-client-port` (one port per connection).
enum HTTP1Server {
    static let script = #"""
    import http.server, ssl, sys, time
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            time.sleep(float(sys.argv[3]))
            self.send_response(201)
            self.send_header("content-length", str(len(body)))
            self.send_header("x-client-port", str(self.client_address[1]))
            self.send_header("x-seen-test", self.headers.get("x-test", ""))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[1], sys.argv[2])
    context.set_alpn_protocols(["http/1.1"])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("listening on 127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()
    """#

    static func start(delay: TimeInterval) async throws -> ServerProcess {
        let certs = try TestCertificates.shared()
        let directory = try TemporaryDirectory()
        try Data(Self.script.utf8).write(to: URL(fileURLWithPath: directory.file("server.py")))
        return try await ServerProcess("/usr/bin/env", ["python3", directory.file("server.py"), certs.serverCertificate, certs.serverKey, String(delay)],
                                       directory: directory, what: "the HTTP/1.1 server") { await $0.listeningPort(timeout: 30) }
    }
}
