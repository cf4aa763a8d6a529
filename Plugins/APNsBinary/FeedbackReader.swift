import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldCrypto

/// Reads the feedback service once: connect, read tuples until it closes.
enum FeedbackReader {
    /// Blocking; call on a thread of your own.
    /// - Throws: when the connection fails or the service closes mid-tuple.
    static func read(endpoint: APNsBinaryConfiguration.HostPort, context: TLSClientContext,
                     timeout: TimeInterval) throws(CryptoError) -> [APNsFeedbackTuple] {
        let connection = try TLSClient.connect(host: endpoint.host, port: endpoint.port, context: context, timeout: timeout)
        defer { connection.shutdown() }
        var limit = timeval(tv_sec: Int(max(1, timeout)), tv_usec: 0)
        setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var parser = APNsFeedbackParser()
        var tuples: [APNsFeedbackTuple] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            switch buffer.withUnsafeMutableBytes({ connection.read(into: $0) }) {
            case .bytes(let n):
                tuples += parser.append(buffer[0..<n])
            case .closed:
                guard parser.bufferedCount == 0 else {
                    throw CryptoError(.other("truncated"), "the feedback service closed the connection mid-tuple (\(parser.bufferedCount) bytes left)")
                }
                return tuples
            case .wantRead, .wantWrite:
                throw CryptoError(.connectionFailed("timed out"), "the feedback service sent nothing for \(Int(max(1, timeout))) s and did not close")
            case .failed(let reason):
                throw CryptoError(.tls(reason), reason)
            }
        }
    }
}
