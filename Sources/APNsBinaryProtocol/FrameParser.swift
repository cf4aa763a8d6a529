/// One notification cut from the stream, before its content is validated.
///
/// The token and payload are optional because a command-2 frame may omit them; `malformed` is
/// set when the bytes do not follow the format (unknown command or item, wrong item size,
/// repeated item, items overrunning the frame), which ends the connection.
public struct BinaryParsedFrame: Sendable, Equatable {
    /// 0, 1 or 2 (any other byte is malformed).
    public var command: UInt8
    /// Command 1's identifier or item 3.
    public var identifier: UInt32? = nil
    /// Command 1's expiry or item 4 (UNIX seconds).
    public var expiry: UInt32? = nil
    /// Item 5.
    public var priority: UInt8? = nil
    /// The token bytes (item 1 for command 2).
    public var token: [UInt8]? = nil
    /// The payload bytes (item 2 for command 2).
    public var payload: [UInt8]? = nil
    /// Why the frame breaks the format, if it does.
    public var malformed: String? = nil
    /// Bytes the frame occupied on the wire.
    public var wireLength: Int = 0

    /// A frame with the given fields (for tests and rejections built by hand).
    public init(command: UInt8, identifier: UInt32? = nil, expiry: UInt32? = nil, priority: UInt8? = nil,
                token: [UInt8]? = nil, payload: [UInt8]? = nil, malformed: String? = nil, wireLength: Int = 0) {
        self.command = command
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
        self.token = token
        self.payload = payload
        self.malformed = malformed
        self.wireLength = wireLength
    }
}

/// Cuts the gateway's byte stream into notifications: commands 0, 1 and 2, big-endian.
///
/// Pure and incremental: feed whatever arrived with ``append(_:)`` (a frame split across reads,
/// or many frames in one read, are both fine) and call ``next()`` until it returns `nil`.
/// After a malformed frame the stream cannot be resynchronised; the caller closes the connection.
public struct BinaryFrameParser: Sendable {
    /// The longest command-2 frame that could be valid: five distinct items of at most 65,535
    /// bytes each. A longer declared length is a protocol error at once, so a client cannot make
    /// the server buffer gigabytes.
    public static let maximumFrameLength = 5 * (3 + Int(UInt16.max))

    private var buffer: [UInt8] = []
    private var start = 0

    /// An empty parser.
    public init() {}

    /// Bytes received and not yet cut into a frame.
    public var bufferedCount: Int { buffer.count - start }

    /// Adds received bytes; call ``next()`` to cut them into frames.
    public mutating func append(_ bytes: some Collection<UInt8>) {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete frame, or `nil` until more bytes arrive.
    public mutating func next() -> BinaryParsedFrame? {
        let available = buffer.count - start
        guard available >= 1 else { return nil }
        let command = buffer[start]
        let frame: BinaryParsedFrame?
        switch command {
        case 0: frame = parseLegacy(command: 0, headerLength: 1)
        case 1: frame = parseLegacy(command: 1, headerLength: 9)
        case 2: frame = parseFrame()
        default:
            frame = BinaryParsedFrame(command: command,
                                      malformed: "unknown command \(command); the gateway accepts commands 0, 1 and 2",
                                      wireLength: 1)
        }
        if let frame { start += frame.wireLength }
        return frame
    }

    private func u16(_ at: Int) -> Int { Int(buffer[at]) << 8 | Int(buffer[at + 1]) }
    private func u32(_ at: Int) -> UInt32 {
        UInt32(buffer[at]) << 24 | UInt32(buffer[at + 1]) << 16 | UInt32(buffer[at + 2]) << 8 | UInt32(buffer[at + 3])
    }

    /// Commands 0 and 1: `command | [identifier u32 | expiry u32] | token length u16 | token | payload length u16 | payload`.
    private func parseLegacy(command: UInt8, headerLength: Int) -> BinaryParsedFrame? {
        let available = buffer.count - start
        guard available >= headerLength + 2 else { return nil }
        let tokenLength = u16(start + headerLength)
        let payloadLengthAt = headerLength + 2 + tokenLength
        guard available >= payloadLengthAt + 2 else { return nil }
        let payloadLength = u16(start + payloadLengthAt)
        let total = payloadLengthAt + 2 + payloadLength
        guard available >= total else { return nil }
        var frame = BinaryParsedFrame(command: command, wireLength: total)
        if command == 1 {
            frame.identifier = u32(start + 1)
            frame.expiry = u32(start + 5)
        }
        let tokenAt = start + headerLength + 2
        frame.token = Array(buffer[tokenAt..<tokenAt + tokenLength])
        let payloadAt = start + payloadLengthAt + 2
        frame.payload = Array(buffer[payloadAt..<payloadAt + payloadLength])
        return frame
    }

    /// Command 2: `2 | frame length u32 | items`, each item `id u8 | length u16 | data`, in any order.
    private func parseFrame() -> BinaryParsedFrame? {
        let available = buffer.count - start
        guard available >= 5 else { return nil }
        let declared = Int(u32(start + 1))
        if declared > Self.maximumFrameLength {
            return BinaryParsedFrame(command: 2,
                                     malformed: "frame length \(declared) exceeds \(Self.maximumFrameLength), the most five items can fill",
                                     wireLength: 5)
        }
        guard available >= 5 + declared else { return nil }
        var frame = BinaryParsedFrame(command: 2, wireLength: 5 + declared)
        let end = start + 5 + declared
        var at = start + 5
        var seen: Set<UInt8> = []
        func fail(_ reason: String) { if frame.malformed == nil { frame.malformed = reason } }
        while at < end {
            guard end - at >= 3 else {
                fail("item header truncated: \(end - at) byte(s) left in the frame, an item header needs 3")
                break
            }
            let id = buffer[at]
            let length = u16(at + 1)
            let dataAt = at + 3
            guard dataAt + length <= end else {
                fail("item \(id) declares \(length) bytes but only \(end - dataAt) remain in the frame")
                break
            }
            at = dataAt + length
            if !seen.insert(id).inserted, (1...5).contains(id) {
                fail("item \(id) appears more than once; a notification has exactly one of each")
                continue
            }
            switch id {
            case 1:
                frame.token = Array(buffer[dataAt..<dataAt + length])
            case 2:
                frame.payload = Array(buffer[dataAt..<dataAt + length])
            case 3:
                if length == 4 { frame.identifier = u32(dataAt) } else { fail("item 3 (notification identifier) must be 4 bytes, found \(length)") }
            case 4:
                if length == 4 { frame.expiry = u32(dataAt) } else { fail("item 4 (expiration date) must be 4 bytes, found \(length)") }
            case 5:
                if length == 1 { frame.priority = buffer[dataAt] } else { fail("item 5 (priority) must be 1 byte, found \(length)") }
            default:
                fail("unknown item id \(id); items are 1 token, 2 payload, 3 identifier, 4 expiration, 5 priority")
            }
        }
        return frame
    }
}
