import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Socket helpers shared by the binary servers.
enum BinarySocket {
    /// Sets (or, with 0, clears) the receive timeout of `fd`.
    static func setReceiveTimeout(_ fd: Int32, seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Half-closes the sending side, so the peer reads EOF after what was written.
    static func shutdownWrite(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Wakes any thread blocked on `fd` (used by `stop()`).
    static func shutdownBoth(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    /// Reads and throws away what the peer still sends, until EOF or `seconds` pass, so closing
    /// does not reset the connection (a reset can destroy the error response in flight).
    static func drain(_ fd: Int32, seconds: Double) {
        setReceiveTimeout(fd, seconds: 0.2)
        let end = Date().addingTimeInterval(seconds)
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)
        while Date() < end {
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return }
            if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return }
        }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }
}
