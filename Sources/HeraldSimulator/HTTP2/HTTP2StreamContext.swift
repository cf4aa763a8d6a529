/// One request/response on a connection; pooled and reused across streams.
///
/// Attached to its nghttp2 stream as stream user data (unretained; the connection's pool keeps
/// it alive). ``generation`` changes on every reuse, so a delayed response can tell its stream
/// was closed meanwhile.
final class HTTP2StreamContext {
    let request = HTTP2RequestHead()
    var streamID: Int32 = 0
    var generation: UInt32 = 0
    var inUse = false

    // The response, prepared when the request is decided.
    var status: StaticString = "200"
    var apnsID = [UInt8](repeating: 0, count: 36)
    var uniqueID = [UInt8](repeating: 0, count: 36)
    var hasUniqueID = false
    var body: [UInt8] = []
    var bodyOffset = 0

    init() {
        body.reserveCapacity(96)
    }

    /// Ready for a new stream.
    func reset(streamID: Int32) {
        self.streamID = streamID
        inUse = true
        request.reset()
        status = "200"
        hasUniqueID = false
        body.removeAll(keepingCapacity: true)
        bodyOffset = 0
    }

    /// Writes the error body `{"reason":"…"}` (with `"timestamp"` for 410).
    func setErrorBody(_ reason: APNsHTTP2Reason, timestamp: Int64?) {
        body.removeAll(keepingCapacity: true)
        bodyOffset = 0
        append("{\"reason\":\"")
        body.append(contentsOf: reason.rawValue.utf8)
        if let timestamp {
            append("\",\"timestamp\":")
            body.append(contentsOf: String(timestamp).utf8)
            append("}")
        } else {
            append("\"}")
        }
    }

    private func append(_ s: StaticString) {
        body.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
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
