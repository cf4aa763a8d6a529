import FoundationEssentials
import Glibc

/// One header field. Names are lowercase (HTTP/2 requires it).
public struct HTTP2Header: Sendable, Equatable, Hashable {
    /// The name, lowercase.
    public var name: String
    /// The value.
    public var value: String

    /// A header field; `name` is lowercased.
    public init(_ name: String, _ value: String) {
        self.name = name.utf8.contains(where: { $0 >= 65 && $0 <= 90 }) ? name.lowercased() : name
        self.value = value
    }

    /// A field whose name is lowercase already.
    init(lowercased name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// A body at a fixed address, shared by the requests of one notification.
///
/// - Important: libcurl and nghttp2 read the bytes without copying them while a request is in
///   flight; the client keeps the body alive until then. The bytes never change.
public final class HTTP2Body: @unchecked Sendable {
    /// How many bytes.
    public let count: Int
    /// The bytes, read-only, at an address fixed for the body's life.
    public let base: UnsafeRawPointer
    /// The bytes as given (for equality checks by callers that share bodies).
    public let bytes: [UInt8]

    /// Copies `bytes` once to a fixed address.
    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
        count = bytes.count
        let storage = UnsafeMutableRawPointer.allocate(byteCount: max(bytes.count, 1), alignment: 1)
        bytes.withUnsafeBytes { if let from = $0.baseAddress { storage.copyMemory(from: from, byteCount: $0.count) } }
        base = UnsafeRawPointer(storage)
    }

    /// An empty body.
    public static let empty = HTTP2Body([])

    deinit { UnsafeMutableRawPointer(mutating: base).deallocate() }
}

/// One request: method, path, headers and a body, sent to the client's origin.
///
/// `:scheme`, `:authority` and `content-length` are the client's. Requests whose ``headers``
/// are the same array (one notification's requests) share one encoding of them, built once;
/// ``ownHeaders`` are encoded per request.
public struct HTTP2Request: Sendable {
    /// `:method`, such as `POST`.
    public var method: String
    /// `:path`, such as `/v1/projects/p/messages:send` or `/push/abc`.
    public var path: String
    /// Headers shared by many requests (lowercase names); encoded once per distinct list.
    public var headers: [HTTP2Header]
    /// Headers of this request alone (APNs's `apns-id`), encoded per request. Default none.
    public var ownHeaders: [HTTP2Header]
    /// The body (``HTTP2Body/empty`` for none).
    public var body: HTTP2Body

    /// A request; `ownHeaders` holds what differs per request when most headers are shared.
    public init(method: String = "POST", path: String, headers: [HTTP2Header], ownHeaders: [HTTP2Header] = [], body: HTTP2Body) {
        self.method = method
        self.path = path
        self.headers = headers
        self.ownHeaders = ownHeaders
        self.body = body
    }
}
