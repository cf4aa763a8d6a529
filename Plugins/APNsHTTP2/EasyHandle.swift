import CCurl
import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A reusable libcurl easy handle with the options every APNs request shares, and the
/// response state of its current request.
final class EasyHandle {
    let handle: UnsafeMutableRawPointer
    var request: PendingRequest?
    var shape: HeaderShape?
    private(set) var body: [UInt8] = []
    private(set) var retryAfter: TimeInterval?
    /// The local port of the connection the current request was sent on (0 until libcurl put it
    /// on a connection): which requests a closed connection took with it.
    fileprivate(set) var localPort = 0
    private let headers = RequestHeaders()
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    /// `https://host:port/3/device/`: each request's URL is this and the device token.
    private let base: String

    /// - Parameter engine: receives libcurl's close of a connection's socket.
    init(settings: EngineSettings, engine: UnsafeMutableRawPointer) {
        handle = curl_easy_init()
        base = settings.configuration.endpoint.baseURL + "/3/device/"
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        let c = settings.configuration
        let me = Unmanaged.passUnretained(self).toOpaque()
        herald_curl_easy_setopt_pointer(handle, CURLOPT_PRIVATE, me)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        herald_curl_easy_setopt_long(handle, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        herald_curl_easy_setopt_long(handle, CURLOPT_POST, 1)
        herald_curl_easy_setopt_long(handle, CURLOPT_PIPEWAIT, 1)
        herald_curl_easy_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        herald_curl_easy_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1)
        herald_curl_easy_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2)
        herald_curl_easy_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(c.connectTimeout * 1000))
        herald_curl_easy_setopt_long(handle, CURLOPT_MAXAGE_CONN, max(1, Int(c.idleTimeout)))
        herald_curl_easy_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1)
        herald_curl_easy_setopt_long(handle, CURLOPT_TCP_KEEPIDLE, 30)
        herald_curl_easy_setopt_long(handle, CURLOPT_TCP_KEEPINTVL, 10)
        herald_curl_easy_setopt_long(handle, CURLOPT_TCP_NODELAY, 1)
        herald_curl_easy_setopt_long(handle, CURLOPT_TIMEOUT_MS, max(1, Int(c.timeout * 1000)))
        // libcurl's smallest upload buffer (its default is 64 KiB per handle, and a pool holds one
        // handle per stream in flight): a payload is at most 5120 bytes and sent from POSTFIELDS.
        herald_curl_easy_setopt_long(handle, CURLOPT_UPLOAD_BUFFERSIZE, 16 * 1024)
        if let ca = c.caFile { herald_curl_easy_setopt_string(handle, CURLOPT_CAINFO, ca) }
        if let proxy = c.proxy {
            herald_curl_easy_setopt_string(handle, CURLOPT_PROXY, proxy)
            herald_curl_easy_setopt_long(handle, CURLOPT_HTTPPROXYTUNNEL, 1)
        } else {
            // An explicit "no proxy": libcurl then skips the proxy environment variables per transfer.
            herald_curl_easy_setopt_string(handle, CURLOPT_PROXY, "")
        }
        if case .certificate(let identity, _) = c.authentication {
            Self.setBlob(handle, CURLOPT_SSLCERT_BLOB, identity.certificatePEM)
            Self.setBlob(handle, CURLOPT_SSLKEY_BLOB, identity.privateKeyPEM)
            herald_curl_easy_setopt_string(handle, CURLOPT_SSLCERTTYPE, "PEM")
            herald_curl_easy_setopt_string(handle, CURLOPT_SSLKEYTYPE, "PEM")
        }
        herald_curl_easy_setopt_closesocket_callback(handle, closeSocketCallback)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_CLOSESOCKETDATA, engine)
        herald_curl_easy_setopt_prereq_callback(handle, prereqCallback)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_PREREQDATA, me)
        herald_curl_easy_setopt_data_callback(handle, CURLOPT_HEADERFUNCTION, headerCallback)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_HEADERDATA, me)
        herald_curl_easy_setopt_data_callback(handle, CURLOPT_WRITEFUNCTION, writeCallback)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_WRITEDATA, me)
    }

    deinit { errorBuffer.deallocate() }

    /// libcurl copies the blob (CURL_BLOB_COPY), so the key bytes live on only in its memory.
    private static func setBlob(_ handle: UnsafeMutableRawPointer, _ option: CURLoption, _ bytes: [UInt8]) {
        var bytes = bytes
        bytes.withUnsafeMutableBytes { raw in
            var blob = curl_blob(data: raw.baseAddress, len: raw.count, flags: UInt32(CURL_BLOB_COPY))
            _ = herald_curl_easy_setopt_blob(handle, option, &blob)
        }
    }

    /// Sets the per-request options: URL, body, headers (the deadline is set once, at creation).
    func prepare(request r: PendingRequest, shape: HeaderShape) {
        request = r
        self.shape = shape
        body.removeAll(keepingCapacity: true)
        retryAfter = nil
        localPort = 0
        errorBuffer[0] = 0
        herald_curl_easy_setopt_string(handle, CURLOPT_URL, base + r.delivery.token)
        // Not copied: the request keeps the bytes alive until the transfer leaves the multi handle.
        herald_curl_easy_setopt_long(handle, CURLOPT_POSTFIELDSIZE, r.payload.count)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_POSTFIELDS, r.payload.base)
        herald_curl_easy_setopt_slist(handle, CURLOPT_HTTPHEADER, headers.list(apnsID: r.delivery.messageID, shape: shape))
    }

    /// Whether this request must open a new connection instead of reusing one (set per request).
    func setFreshConnection(_ fresh: Bool) {
        guard fresh != freshConnection else { return }
        freshConnection = fresh
        herald_curl_easy_setopt_long(handle, CURLOPT_FRESH_CONNECT, fresh ? 1 : 0)
    }
    private var freshConnection = false

    /// libcurl's message for a failed transfer, with the detail of its error buffer.
    func errorMessage(_ code: CURLcode) -> String {
        let detail = String(cString: errorBuffer)
        return detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
    }

    fileprivate func header(_ line: UnsafeBufferPointer<UInt8>) {
        // Only `retry-after` matters: APNs echoes the `apns-id` Herald sent, so the answer's
        // id is known already. Checked byte-wise: this runs for every header of every answer.
        let name: StaticString = "retry-after:"
        guard line.count > name.utf8CodeUnitCount, line[0] | 0x20 == UInt8(ascii: "r") else { return }
        let matches = name.withUTF8Buffer { expected in
            (0..<expected.count).allSatisfy { line[$0] | 0x20 == expected[$0] || line[$0] == expected[$0] }
        }
        guard matches else { return }
        var seconds = 0
        for byte in line[name.utf8CodeUnitCount...] {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): seconds = seconds * 10 + Int(byte - UInt8(ascii: "0"))
            case UInt8(ascii: " "), 0x0D, 0x0A: continue
            default: return  // an HTTP date: not what APNs sends; ignore
            }
        }
        retryAfter = TimeInterval(seconds)
    }

    fileprivate func append(_ data: UnsafeBufferPointer<UInt8>) {
        if body.count < 16_384 { body.append(contentsOf: data) }
    }
}

private let headerCallback: herald_curl_data_callback = { pointer, size, count, user in
    let total = size * count
    guard let pointer, let user else { return total }
    let line = UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: total)
    Unmanaged<EasyHandle>.fromOpaque(user).takeUnretainedValue().header(line)
    return total
}

private let writeCallback: herald_curl_data_callback = { pointer, size, count, user in
    let total = size * count
    guard let pointer, let user else { return total }
    let data = UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: total)
    Unmanaged<EasyHandle>.fromOpaque(user).takeUnretainedValue().append(data)
    return total
}

/// libcurl put the request on a connection (new or reused), just before sending it.
private let prereqCallback: herald_curl_prereq_callback = { user, _, _, _, localPort in
    if let user { Unmanaged<EasyHandle>.fromOpaque(user).takeUnretainedValue().localPort = Int(localPort) }
    return 0  // CURL_PREREQFUNC_OK
}

private let closeSocketCallback: herald_curl_closesocket_callback = { engine, socket in
    if let engine { Unmanaged<CurlEngine>.fromOpaque(engine).takeUnretainedValue().socketClosing(socket) }
    return close(socket)
}
