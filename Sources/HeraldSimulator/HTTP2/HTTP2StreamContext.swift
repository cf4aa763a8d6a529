/// One request/response on a connection; pooled and reused across streams.
///
/// Attached to its nghttp2 stream as stream user data (unretained; the connection's pool keeps
/// it alive). ``generation`` changes on every reuse, so a delayed response can tell its stream
/// was closed meanwhile. The response lives in fixed buffers, so answering allocates nothing.
final class HTTP2StreamContext {
    let request = HTTP2RequestHead()
    var streamID: Int32 = 0
    var generation: UInt32 = 0
    var inUse = false

    // The response, prepared when the request is decided.
    var status: StaticString = "200"
    /// 36 bytes: the `apns-id` answered.
    let apnsID: UnsafeMutablePointer<UInt8>
    /// 36 bytes: the `apns-unique-id` answered (when ``hasUniqueID``).
    let uniqueID: UnsafeMutablePointer<UInt8>
    var hasUniqueID = false
    /// A broadcast: the id is answered as `apns-request-id`.
    var isBroadcast = false
    /// The error body (`{"reason":…}`), ``bodyCount`` bytes.
    private let bodyBuffer: UnsafeMutablePointer<UInt8>
    private(set) var bodyCount = 0
    var bodyOffset = 0
    private static let bodyCapacity = 128

    init() {
        apnsID = .allocate(capacity: 36)
        uniqueID = .allocate(capacity: 36)
        bodyBuffer = .allocate(capacity: Self.bodyCapacity)
    }

    deinit {
        apnsID.deallocate()
        uniqueID.deallocate()
        bodyBuffer.deallocate()
    }

    /// Ready for a new stream.
    func reset(streamID: Int32) {
        self.streamID = streamID
        inUse = true
        request.reset()
        status = "200"
        hasUniqueID = false
        isBroadcast = false
        bodyCount = 0
        bodyOffset = 0
    }

    var hasBody: Bool { bodyCount > 0 }

    /// Copies up to `length` more body bytes to `out`; returns how many, and whether the body is done.
    func readBody(into out: UnsafeMutablePointer<UInt8>, length: Int) -> (count: Int, done: Bool) {
        let n = min(length, bodyCount - bodyOffset)
        out.update(from: bodyBuffer + bodyOffset, count: n)
        bodyOffset += n
        return (n, bodyOffset == bodyCount)
    }

    /// No body (an answer to HEAD).
    func setNoBody() {
        bodyCount = 0
        bodyOffset = 0
    }

    /// Writes the error body `{"reason":"…"}` (with `"timestamp"` for 410).
    func setErrorBody(_ reason: APNsHTTP2Reason, timestamp: Int64?) {
        bodyCount = 0
        bodyOffset = 0
        append("{\"reason\":\"")
        append(reason.rawValue)
        if let timestamp {
            append("\",\"timestamp\":")
            append(String(timestamp))
            append("}")
        } else {
            append("\"}")
        }
    }

    private func append(_ s: StaticString) {
        let n = min(s.utf8CodeUnitCount, Self.bodyCapacity - bodyCount)
        (bodyBuffer + bodyCount).update(from: s.utf8Start, count: n)
        bodyCount += n
    }

    private func append(_ s: String) {
        for byte in s.utf8 where bodyCount < Self.bodyCapacity {
            bodyBuffer[bodyCount] = byte
            bodyCount += 1
        }
    }

    /// A copy of 36 bytes as a string.
    static func string(_ p: UnsafeMutablePointer<UInt8>) -> String {
        String(decoding: UnsafeBufferPointer(start: p, count: 36), as: UTF8.self)
    }

    static func statusText(_ status: Int) -> StaticString {
        switch status {
        case 200: return "200"
        case 400: return "400"
        case 403: return "403"
        case 404: return "404"
        case 405: return "405"
        case 410: return "410"
        case 413: return "413"
        case 429: return "429"
        case 500: return "500"
        default: return "503"
        }
    }
}
