internal import CCurl
import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A reusable libcurl easy handle with the options every request of its client shares, and the
/// answer state of its current request.
final class EasyHandle {
    let handle: UnsafeMutableRawPointer
    var request: PendingRequest?
    var shape: HeaderShape?
    private(set) var status = 0
    private(set) var body: [UInt8] = []
    private(set) var headers: [HTTP2Header] = []
    /// The local port of the connection the current request was sent on (0 until libcurl put it
    /// on a connection): which requests a closed connection took with it.
    fileprivate(set) var localPort = 0
    private let ownHeaders = RequestHeaders()
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    /// `https://host:port`: each request's URL is this and its path.
    private let origin: String
    /// The method the handle is set up for (`POST` after creation).
    private var method = "POST"

    /// - Parameter engine: receives libcurl's close of a connection's socket.
    init(settings: ClientSettings, engine: UnsafeMutableRawPointer) {
        handle = curl_easy_init()
        let c = settings.configuration
        origin = c.origin
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        let me = Unmanaged.passUnretained(self).toOpaque()
        herald_curl_easy_setopt_pointer(handle, CURLOPT_PRIVATE, me)
        herald_curl_easy_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        // HTTP/2 when the server's ALPN offers it, else HTTP/1.1 (refused later unless allowHTTP1).
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
        // handle per stream in flight): bodies are small and sent from POSTFIELDS.
        herald_curl_easy_setopt_long(handle, CURLOPT_UPLOAD_BUFFERSIZE, 16 * 1024)
        if let ca = c.caFile { herald_curl_easy_setopt_string(handle, CURLOPT_CAINFO, ca) }
        if let proxy = c.proxy {
            herald_curl_easy_setopt_string(handle, CURLOPT_PROXY, proxy)
            herald_curl_easy_setopt_long(handle, CURLOPT_HTTPPROXYTUNNEL, 1)
        } else {
            // An explicit "no proxy": libcurl then skips the proxy environment variables per transfer.
            herald_curl_easy_setopt_string(handle, CURLOPT_PROXY, "")
        }
        if let identity = c.clientIdentity {
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

    /// Sets the per-request options: method, URL, body, headers (the deadline is set once, at creation).
    func prepare(request r: PendingRequest, shape: HeaderShape) {
        request = r
        self.shape = shape
        status = 0
        body.removeAll(keepingCapacity: true)
        headers.removeAll(keepingCapacity: true)
        localPort = 0
        errorBuffer[0] = 0
        let q = r.request
        if q.method != method {
            method = q.method
            if method == "GET" {
                herald_curl_easy_setopt_long(handle, CURLOPT_HTTPGET, 1)
            } else {
                herald_curl_easy_setopt_long(handle, CURLOPT_POST, 1)
            }
            // libcurl sends the method it derives (POST, GET) unless told otherwise.
            herald_curl_easy_setopt_string(handle, CURLOPT_CUSTOMREQUEST, method == "POST" || method == "GET" ? nil : method)
        }
        herald_curl_easy_setopt_string(handle, CURLOPT_URL, origin + q.path)
        if method != "GET" {
            // Not copied: the request keeps the bytes alive until the transfer leaves the multi handle.
            herald_curl_easy_setopt_long(handle, CURLOPT_POSTFIELDSIZE, q.body.count)
            herald_curl_easy_setopt_pointer(handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: q.body.base))
        }
        herald_curl_easy_setopt_slist(handle, CURLOPT_HTTPHEADER, ownHeaders.list(own: q.ownHeaders, shape: shape))
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

    /// One header line of the answer: a status line (`HTTP/2 200`) starts a new set (after a 1xx),
    /// a field is kept with its name lowercased.
    fileprivate func header(_ line: UnsafeBufferPointer<UInt8>) {
        var end = line.count
        while end > 0, line[end - 1] == 0x0D || line[end - 1] == 0x0A { end -= 1 }
        guard end > 0 else { return }
        let text = line[..<end]
        if text.starts(with: "HTTP/".utf8) {
            headers.removeAll(keepingCapacity: true)
            // "HTTP/2 200" or "HTTP/1.1 200 OK": the status after the first space.
            if let space = text.firstIndex(of: 32) {
                var s = 0
                for b in text[(space + 1)...].prefix(3) where b >= 48 && b <= 57 { s = s * 10 + Int(b - 48) }
                status = s
            }
            return
        }
        guard let colon = text.firstIndex(of: UInt8(ascii: ":")) else { return }
        var valueStart = colon + 1
        while valueStart < end, text[valueStart] == 32 || text[valueStart] == 9 { valueStart += 1 }
        let rawName = text[..<colon]
        let name = rawName.contains(where: { $0 >= 65 && $0 <= 90 })
            ? String(decoding: rawName.map { $0 >= 65 && $0 <= 90 ? $0 | 0x20 : $0 }, as: UTF8.self)
            : String(decoding: rawName, as: UTF8.self)
        headers.append(HTTP2Header(lowercased: name, String(decoding: text[valueStart...], as: UTF8.self)))
    }

    fileprivate func append(_ data: UnsafeBufferPointer<UInt8>) {
        if body.count < HTTP2Response.bodyLimit { body.append(contentsOf: data.prefix(HTTP2Response.bodyLimit - body.count)) }
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
