import Foundation
import HeraldCrypto
import HeraldTestKit

/// Runs the `openssl` command-line tool.
func openssl(_ arguments: [String], stdin: String? = nil) async throws -> ProcessResult {
    try await Run.program("/usr/bin/env", ["openssl"] + arguments, stdin: stdin)
}

/// ECDSA signature conversion written independently of HeraldCrypto's, for cross-checks
/// against the `openssl` tool (which speaks DER).
enum TestDER {
    /// DER SEQUENCE{INTEGER r, INTEGER s} → raw r||s, 32 bytes each.
    static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        guard der.count >= 8, der[0] == 0x30, Int(der[1]) == der.count - 2 else { return nil }
        var index = 2
        var out: [UInt8] = []
        for _ in 0..<2 {
            guard der[index] == 0x02 else { return nil }
            let length = Int(der[index + 1])
            var value = Array(der[(index + 2)..<(index + 2 + length)])
            while value.count > 32, value.first == 0 { value.removeFirst() }
            guard value.count <= 32 else { return nil }
            out += [UInt8](repeating: 0, count: 32 - value.count) + value
            index += 2 + length
        }
        return index == der.count ? out : nil
    }

    /// raw r||s → DER.
    static func der(fromRaw raw: [UInt8]) -> [UInt8] {
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop { $0 == 0 })
            if value.isEmpty { value = [0] }
            if value[0] >= 0x80 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }
}

/// A hand-written TCP listener on loopback, port 0.
final class TestListener: @unchecked Sendable {
    let fd: Int32
    let port: Int

    /// Listens on 127.0.0.1 (or ::1 with `ipv6`), port 0.
    init(ipv6: Bool = false) throws {
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSetupError("socket: \(String(cString: strerror(errno)))") }
        var storage = sockaddr_storage()
        var length = socklen_t(ipv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        withUnsafeMutableBytes(of: &storage) { raw in
            if ipv6 {
                let address = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                address.pointee.sin6_family = sa_family_t(AF_INET6)
                address.pointee.sin6_addr = in6addr_loopback
            } else {
                let address = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
                address.pointee.sin_family = sa_family_t(AF_INET)
                address.pointee.sin_addr.s_addr = inet_addr("127.0.0.1")
            }
        }
        let bound = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw TestSetupError("bind/listen: \(String(cString: strerror(errno)))")
        }
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.fd = fd
        port = withUnsafeBytes(of: &storage) { raw in
            ipv6 ? Int(UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port))
                 : Int(UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port))
        }
    }

    deinit { close(fd) }

    /// Accepts one connection (waiting up to 10 s); the socket gets 10 s read/write timeouts.
    func accept() -> Int32? {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 10_000) == 1 else { return nil }
        let client = Glibc.accept(fd, nil, nil)
        guard client >= 0 else { return nil }
        setTimeouts(client)
        return client
    }
}

/// What the test server saw on one connection.
struct ServerOutcome: Sendable {
    var handshake: TLSConnection.IOResult
    var alpn: String?
    var peer: CertificateInfo?
    var received: [UInt8] = []
}

/// A one-connection TLS server on its own thread (started at once, so it never depends on the
/// test's executor): handshakes, then echoes every byte back until the client closes (or, with
/// `reply`, answers once the first `reply.request` bytes arrived, and closes).
final class TestServer: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result = ServerOutcome(handshake: .failed("not finished"))

    init(_ listener: TestListener, context: TLSServerContext, reply: (request: Int, response: [UInt8])? = nil) {
        Thread.detachNewThread { [self] in
            result = TestServer.serve(listener, context: context, reply: reply)
            done.signal()
        }
    }

    /// Waits (up to 20 s) for the connection to end and returns what the server saw.
    func outcome() -> ServerOutcome {
        guard done.wait(timeout: .now() + 20) == .success else { return ServerOutcome(handshake: .failed("server timed out")) }
        return result
    }

    private static func serve(_ listener: TestListener, context: TLSServerContext,
                              reply: (request: Int, response: [UInt8])?) -> ServerOutcome {
        guard let fd = listener.accept() else { return ServerOutcome(handshake: .failed("no connection")) }
        guard let connection = try? TLSConnection.server(fd: fd, context: context) else {
            close(fd)
            return ServerOutcome(handshake: .failed("TLSConnection.server threw"))
        }
        defer { connection.shutdown() }
        var outcome = ServerOutcome(handshake: connection.handshake())
        guard outcome.handshake == .bytes(0) else { return outcome }
        outcome.alpn = connection.negotiatedALPN
        outcome.peer = connection.peerCertificate
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let result = buffer.withUnsafeMutableBytes { connection.read(into: $0) }
            guard case .bytes(let n) = result else { break }
            outcome.received += buffer[0..<n]
            if let reply {
                if outcome.received.count >= reply.request {
                    _ = writeAll(connection, reply.response)
                    break
                }
            } else if !writeAll(connection, Array(buffer[0..<n])) {
                break
            }
        }
        return outcome
    }
}

/// Gives a blocking socket 10 s read and write timeouts, so a broken test fails instead of hanging.
func setTimeouts(_ fd: Int32) {
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
}

/// Writes all of `bytes` on a blocking connection.
@discardableResult
func writeAll(_ connection: TLSConnection, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let result = bytes[offset...].withUnsafeBytes { connection.write($0) }
        guard case .bytes(let n) = result else { return false }
        offset += n
    }
    return true
}

/// Reads exactly `count` bytes on a blocking connection (fewer when it closes or fails).
func readExactly(_ connection: TLSConnection, _ count: Int) -> (bytes: [UInt8], last: TLSConnection.IOResult) {
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    var last = TLSConnection.IOResult.bytes(0)
    while out.count < count {
        last = buffer.withUnsafeMutableBytes { connection.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<min($0.count, count - out.count)])) }
        guard case .bytes(let n) = last else { break }
        out += buffer[0..<n]
    }
    return (out, last)
}

/// A plain blocking TCP connection to 127.0.0.1:port.
func tcpConnect(port: Int) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let r = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard r == 0 else { close(fd); throw TestSetupError("connect: \(String(cString: strerror(errno)))") }
    setTimeouts(fd)
    return fd
}

/// Runs `body` on its own thread; ``wait()`` returns its result.
final class TestServerThread<T: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: T?

    init(_ body: @escaping @Sendable () -> T) {
        Thread.detachNewThread { [self] in
            result = body()
            done.signal()
        }
    }

    func wait() -> T? {
        guard done.wait(timeout: .now() + 20) == .success else { return nil }
        return result
    }
}

/// Bytes from hex text (spaces allowed), for known-answer vectors.
func hexBytes(_ text: String) -> [UInt8] {
    let digits = Array(text.filter { !$0.isWhitespace })
    precondition(digits.count % 2 == 0, "odd hex")
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
}

/// Bytes from base64url text with whitespace removed (RFCs wrap long values).
func b64(_ text: String) -> [UInt8] {
    Base64URL.decode(text.filter { !$0.isWhitespace })!
}

/// Lower-case hex of `bytes`.
func hexString(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
