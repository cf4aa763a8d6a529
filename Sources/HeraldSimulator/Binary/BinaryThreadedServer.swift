import Foundation
import HeraldCore

/// Accepts connections on one thread and serves each on a thread of its own, with blocking I/O.
///
/// Simple and adequate for simulators: a handful of connections, never thousands. ``stop()``
/// wakes every blocked thread (by shutting its socket down) and waits for them to finish.
final class BinaryThreadedServer: Sendable {
    /// Serves one connection; returns when the connection is done. The server closes `fd` afterwards.
    typealias Handler = @Sendable (_ stream: any BinaryByteStream, _ fd: Int32, _ connection: Int) -> Void
    /// Told when a client is refused at the handshake.
    typealias Refusal = @Sendable (_ connection: Int, _ reason: String) -> Void

    private struct State {
        var stopping = false
        var nextConnection = 1
        var active: Set<Int32> = []
    }

    let listener: BinaryTCPListener
    private let opener: BinaryStreamOpener
    private let handler: Handler
    private let refusal: Refusal
    private let handshakeTimeout: Double
    private let state = Locked(State())
    private let threads = DispatchGroup()

    init(listener: BinaryTCPListener, opener: @escaping BinaryStreamOpener, handshakeTimeout: Double = 10,
         refusal: @escaping Refusal, handler: @escaping Handler) {
        self.listener = listener
        self.opener = opener
        self.handler = handler
        self.refusal = refusal
        self.handshakeTimeout = handshakeTimeout
    }

    func start() {
        threads.enter()
        let thread = Thread { [self] in
            acceptLoop()
            threads.leave()
        }
        thread.name = "binary-accept-\(listener.port)"
        thread.start()
    }

    private func acceptLoop() {
        defer { listener.close() }
        while let fd = listener.accept() {
            let number: Int? = state.withLock { s in
                if s.stopping { return nil }
                s.active.insert(fd)
                s.nextConnection += 1
                return s.nextConnection - 1
            }
            guard let number else {
                BinarySocket.close(fd)
                break
            }
            threads.enter()
            let thread = Thread { [self] in
                serve(fd: fd, connection: number)
                state.withLock { _ = $0.active.remove(fd) }
                BinarySocket.close(fd)
                threads.leave()
            }
            thread.name = "binary-connection-\(number)"
            thread.start()
        }
    }

    private func serve(fd: Int32, connection: Int) {
        BinarySocket.setReceiveTimeout(fd, seconds: handshakeTimeout)
        switch opener(fd) {
        case .failure(let error):
            refusal(connection, error.description)
        case .success(let stream):
            BinarySocket.setReceiveTimeout(fd, seconds: 0)
            handler(stream, fd, connection)
        }
    }

    /// Stops accepting, wakes every connection thread, and waits (up to `timeout`) for them.
    func stop(timeout: Double = 5) {
        let first: Bool = state.withLock { s in
            if s.stopping { return false }
            s.stopping = true
            for fd in s.active { BinarySocket.shutdownBoth(fd) }
            return true
        }
        if first { listener.shutdown() }
        _ = threads.wait(timeout: .now() + timeout)
    }
}
