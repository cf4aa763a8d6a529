/// Which command a client writes notifications with.
public enum APNsBinaryFormat: String, Sendable, CaseIterable {
    /// Command 0: token and payload only; no identifier, so the gateway's error response cannot
    /// name the failed notification (its identifier is 0).
    case simple
    /// Command 1: identifier and expiry, then token and payload.
    case enhanced
    /// Command 2: a frame of items 1 (token), 2 (payload), 3 (identifier), 4 (expiration), 5 (priority).
    case frame

    /// The command byte.
    public var command: UInt8 {
        switch self {
        case .simple: return 0
        case .enhanced: return 1
        case .frame: return 2
        }
    }

    /// Whether notifications in this format carry an identifier the error response can echo.
    public var carriesIdentifier: Bool { self != .simple }
}

/// Writes notifications in the binary provider API's layout, big-endian, straight into a
/// caller's buffer (no intermediate arrays, so a client can stream thousands per write).
public enum APNsBinaryFrameEncoder {
    /// Bytes ``append(to:format:token:payload:identifier:expiry:priority:)`` adds for these sizes.
    public static func length(format: APNsBinaryFormat, tokenCount: Int, payloadCount: Int) -> Int {
        switch format {
        case .simple: return 1 + 2 + tokenCount + 2 + payloadCount
        case .enhanced: return 9 + 2 + tokenCount + 2 + payloadCount
        case .frame: return 5 + 3 + tokenCount + 3 + payloadCount + 7 + 7 + 4
        }
    }

    /// Appends one notification.
    /// - Parameters:
    ///   - identifier: commands 1 and 2 (item 3); ignored by command 0.
    ///   - expiry: UNIX seconds, 0 for "do not store"; commands 1 and 2 (item 4).
    ///   - priority: 10 or 5; command 2 only (item 5).
    /// - Important: token and payload lengths must fit in 16 bits; callers check sizes first.
    ///   Concrete arrays (not generic collections) so the copy is a `memcpy` across modules.
    public static func append(to buffer: inout [UInt8], format: APNsBinaryFormat, token: [UInt8],
                              payload: [UInt8], identifier: UInt32, expiry: UInt32, priority: UInt8) {
        switch format {
        case .simple:
            buffer.append(0)
            u16(&buffer, token.count)
            buffer.append(contentsOf: token)
            u16(&buffer, payload.count)
            buffer.append(contentsOf: payload)
        case .enhanced:
            buffer.append(1)
            u32(&buffer, identifier)
            u32(&buffer, expiry)
            u16(&buffer, token.count)
            buffer.append(contentsOf: token)
            u16(&buffer, payload.count)
            buffer.append(contentsOf: payload)
        case .frame:
            buffer.append(2)
            u32(&buffer, UInt32(3 + token.count + 3 + payload.count + 7 + 7 + 4))
            buffer.append(1)
            u16(&buffer, token.count)
            buffer.append(contentsOf: token)
            buffer.append(2)
            u16(&buffer, payload.count)
            buffer.append(contentsOf: payload)
            buffer.append(3)
            u16(&buffer, 4)
            u32(&buffer, identifier)
            buffer.append(4)
            u16(&buffer, 4)
            u32(&buffer, expiry)
            buffer.append(5)
            u16(&buffer, 1)
            buffer.append(priority)
        }
    }

    @inline(__always)
    private static func u16(_ buffer: inout [UInt8], _ value: Int) {
        buffer.append(UInt8(truncatingIfNeeded: value >> 8))
        buffer.append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    private static func u32(_ buffer: inout [UInt8], _ value: UInt32) {
        buffer.append(UInt8(truncatingIfNeeded: value >> 24))
        buffer.append(UInt8(truncatingIfNeeded: value >> 16))
        buffer.append(UInt8(truncatingIfNeeded: value >> 8))
        buffer.append(UInt8(truncatingIfNeeded: value))
    }
}
