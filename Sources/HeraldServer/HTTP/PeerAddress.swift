import Glibc
import HeraldCore

extension IPAddress {
    /// The address of a connected socket's peer; `nil` for a socket that is not IPv4 or IPv6
    /// (or not connected).
    public init?(peerOf fd: Int32) {
        guard fd >= 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) == 0 }
        }
        guard ok else { return nil }
        switch Int32(storage.ss_family) {
        case AF_INET:
            let v4 = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr } }
            self.init(ipv4: withUnsafeBytes(of: v4.s_addr) { Array($0) })
        case AF_INET6:
            let v6 = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr } }
            self.init(bytes: withUnsafeBytes(of: v6) { Array($0) })
        default:
            return nil
        }
    }
}
