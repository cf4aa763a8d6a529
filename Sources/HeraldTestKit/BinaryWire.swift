import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The binary provider API written out independently of the simulator's parser and the transport's encoder, from Apple's
/// tables (commands 0, 1, 2; error response; feedback tuples), so the tests check the parser and encoder
/// against the documented layout rather than against itself.
public enum BinaryWire {
    public static func u16(_ v: Int) -> [UInt8] { [UInt8((v >> 8) & 0xff), UInt8(v & 0xff)] }
    public static func u32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)] }

    /// A 32-byte token whose bytes are all `seed`.
    public static func token(_ seed: UInt8, count: Int = 32) -> [UInt8] { [UInt8](repeating: seed, count: count) }
    public static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    public static let alert = Array(#"{"aps":{"alert":"hello"}}"#.utf8)

    /// Command 0: `0 | token length u16 | token | payload length u16 | payload`.
    public static func simple(token: [UInt8], payload: [UInt8] = alert) -> [UInt8] {
        [0] + u16(token.count) + token + u16(payload.count) + payload
    }

    /// Command 1: `1 | identifier | expiry u32 | token length u16 | token | payload length u16 | payload`.
    public static func enhanced(identifier: UInt32, expiry: UInt32 = 0, token: [UInt8], payload: [UInt8] = alert) -> [UInt8] {
        [1] + u32(identifier) + u32(expiry) + u16(token.count) + token + u16(payload.count) + payload
    }

    public static func item(_ id: UInt8, _ data: [UInt8]) -> [UInt8] { [id] + u16(data.count) + data }

    /// Command 2 from raw items: `2 | frame length u32 | items`.
    public static func frame(_ items: [[UInt8]]) -> [UInt8] {
        let data = items.flatMap { $0 }
        return [2] + u32(UInt32(data.count)) + data
    }

    /// Command 2 with the usual items (token, payload, identifier, expiration, priority), in that order.
    public static func frame(token: [UInt8]?, payload: [UInt8]? = alert, identifier: UInt32? = nil,
                      expiry: UInt32? = nil, priority: UInt8? = nil) -> [UInt8] {
        var items: [[UInt8]] = []
        if let token { items.append(item(1, token)) }
        if let payload { items.append(item(2, payload)) }
        if let identifier { items.append(item(3, u32(identifier))) }
        if let expiry { items.append(item(4, u32(expiry))) }
        if let priority { items.append(item(5, [priority])) }
        return frame(items)
    }

    /// An error response `[8][status][identifier u32]`, decoded.
    public struct ErrorResponse: Equatable, CustomStringConvertible {
        public var command: UInt8
        public var status: UInt8
        public var identifier: UInt32
        public var description: String { "[\(command)][\(status)][\(identifier)]" }
        public init(command: UInt8, status: UInt8, identifier: UInt32) {
            self.command = command
            self.status = status
            self.identifier = identifier
        }
    }

    public static func decodeError(_ bytes: [UInt8]) -> ErrorResponse? {
        guard bytes.count == 6 else { return nil }
        let id = UInt32(bytes[2]) << 24 | UInt32(bytes[3]) << 16 | UInt32(bytes[4]) << 8 | UInt32(bytes[5])
        return ErrorResponse(command: bytes[0], status: bytes[1], identifier: id)
    }

    /// Feedback tuples `[time u32][length u16][token]`; `nil` if the bytes end mid-tuple.
    public static func decodeFeedback(_ bytes: [UInt8]) -> [(time: UInt32, token: [UInt8])]? {
        var out: [(UInt32, [UInt8])] = []
        var i = 0
        while i < bytes.count {
            guard bytes.count - i >= 6 else { return nil }
            let time = UInt32(bytes[i]) << 24 | UInt32(bytes[i + 1]) << 16 | UInt32(bytes[i + 2]) << 8 | UInt32(bytes[i + 3])
            let n = Int(bytes[i + 4]) << 8 | Int(bytes[i + 5])
            guard bytes.count - i - 6 >= n else { return nil }
            out.append((time, Array(bytes[i + 6..<i + 6 + n])))
            i += 6 + n
        }
        return out
    }
}

