import FoundationEssentials
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

    /// Wakes any thread blocked on `fd` (used by `stop()`).
    static func shutdownBoth(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }
}
