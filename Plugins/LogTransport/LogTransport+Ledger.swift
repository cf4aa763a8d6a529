import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// The log file is the transport's own record of what it accepted: after a crash the daemon
/// asks which `apns-id`s are already in it, so a delivery written just before the crash is not
/// written twice (exactly once per device in the file).
extension LogTransport: DeliveryLedger {
    public func acceptedDeliveries(among apnsIDs: Set<String>) async throws -> Set<String> {
        guard let path = configuration.path, !apnsIDs.isEmpty else { return [] }
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
        } catch {
            throw TransportError(transport: name, message: "cannot read \(path) to check earlier deliveries: \(SystemError.describe(error))")
        }
        return Self.apnsIDs(in: data, among: apnsIDs)
    }

    /// The `"apns-id":"…"` values in JSON lines that are in `wanted`.
    static func apnsIDs(in data: Data, among wanted: Set<String>) -> Set<String> {
        let needle = Array(#""apns-id":""#.utf8)
        var found: Set<String> = []
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            let bytes = raw.bindMemory(to: UInt8.self)
            let n = bytes.count, m = needle.count
            var i = 0
            while i + m + 36 <= n {
                // Every match starts with the quote before "apns-id".
                if bytes[i] != needle[0] { i += 1; continue }
                var j = 1
                while j < m && bytes[i + j] == needle[j] { j += 1 }
                if j < m { i += 1; continue }
                let start = i + m
                let id = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<(start + 36)]), as: UTF8.self)
                if wanted.contains(id) { found.insert(id) }
                i = start + 36
            }
        }
        return found
    }
}
