/// One tuple of the feedback service: `[time u32][token length u16][token]`, big-endian.
public struct APNsFeedbackTuple: Sendable, Hashable {
    /// The device token bytes.
    public var token: [UInt8]
    /// UNIX seconds: when APNs learned the app was no longer on the device.
    public var time: UInt32

    /// A tuple for `token`, dead since `time` (UNIX seconds).
    public init(token: [UInt8], time: UInt32) {
        self.token = token
        self.time = time
    }

    /// The token as lower-case hex.
    public var tokenHex: String { BinaryHex.encode(token) }

    /// The tuple on the wire.
    public var bytes: [UInt8] {
        let n = UInt16(truncatingIfNeeded: token.count)
        return [UInt8(truncatingIfNeeded: time >> 24), UInt8(truncatingIfNeeded: time >> 16),
                UInt8(truncatingIfNeeded: time >> 8), UInt8(truncatingIfNeeded: time),
                UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)] + token
    }
}

/// Cuts the feedback service's byte stream into tuples, however it is split across reads.
public struct APNsFeedbackParser: Sendable {
    private var buffer: [UInt8] = []

    /// An empty parser.
    public init() {}

    /// Bytes received that do not yet make a whole tuple (non-zero at end of stream means the
    /// service closed mid-tuple).
    public var bufferedCount: Int { buffer.count }

    /// Adds received bytes and returns the tuples they complete.
    public mutating func append(_ bytes: some Collection<UInt8>) -> [APNsFeedbackTuple] {
        buffer.append(contentsOf: bytes)
        var tuples: [APNsFeedbackTuple] = []
        var at = 0
        while buffer.count - at >= 6 {
            let n = Int(buffer[at + 4]) << 8 | Int(buffer[at + 5])
            guard buffer.count - at - 6 >= n else { break }
            let time = UInt32(buffer[at]) << 24 | UInt32(buffer[at + 1]) << 16 | UInt32(buffer[at + 2]) << 8 | UInt32(buffer[at + 3])
            tuples.append(APNsFeedbackTuple(token: Array(buffer[at + 6..<at + 6 + n]), time: time))
            at += 6 + n
        }
        buffer.removeFirst(at)
        return tuples
    }
}
