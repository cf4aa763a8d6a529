/// One HTTP/2 request as the simulator received it: header bytes, known fields, and the body.
///
/// Built by the nghttp2 glue without a `String` per header: every name and value is appended to
/// one reusable byte buffer, and the headers APNs defines are remembered as ranges into it.
/// Tests build one from strings with ``init(method:path:headers:body:)``.
struct HTTP2RequestHead: Sendable {
    /// A header field: ranges into ``storage``.
    struct Field: Sendable {
        var nameStart: Int32
        var nameLength: Int32
        var valueStart: Int32
        var valueLength: Int32
    }

    /// The headers the validator reads, in a fixed order.
    enum Known: Int, CaseIterable, Sendable {
        case method, path, authorization, apnsID, apnsTopic, apnsPushType, apnsPriority, apnsExpiration, apnsCollapseID

        var name: StaticString {
            switch self {
            case .method: return ":method"
            case .path: return ":path"
            case .authorization: return "authorization"
            case .apnsID: return "apns-id"
            case .apnsTopic: return "apns-topic"
            case .apnsPushType: return "apns-push-type"
            case .apnsPriority: return "apns-priority"
            case .apnsExpiration: return "apns-expiration"
            case .apnsCollapseID: return "apns-collapse-id"
            }
        }

        /// The known header named by `name` (lower-case, as HTTP/2 requires), if any.
        static func match(_ name: UnsafeRawBufferPointer) -> Known? {
            let n = name.count
            guard n >= 5 else { return nil }
            let first = name[0], last = name[n - 1]
            switch n {
            case 5 where first == UInt8(ascii: ":") && last == UInt8(ascii: "h"):
                return equal(name, Known.path.name) ? .path : nil
            case 7 where first == UInt8(ascii: ":"):
                return equal(name, Known.method.name) ? .method : nil
            case 7 where first == UInt8(ascii: "a"):
                return equal(name, Known.apnsID.name) ? .apnsID : nil
            case 10:
                return equal(name, Known.apnsTopic.name) ? .apnsTopic : nil
            case 13:
                if first == UInt8(ascii: "a"), name[1] == UInt8(ascii: "u") {
                    return equal(name, Known.authorization.name) ? .authorization : nil
                }
                return equal(name, Known.apnsPriority.name) ? .apnsPriority : nil
            case 14:
                return equal(name, Known.apnsPushType.name) ? .apnsPushType : nil
            case 15:
                return equal(name, Known.apnsExpiration.name) ? .apnsExpiration : nil
            case 16:
                return equal(name, Known.apnsCollapseID.name) ? .apnsCollapseID : nil
            default:
                return nil
            }
        }

        private static func equal(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
            guard bytes.count == literal.utf8CodeUnitCount else { return false }
            return memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0
        }
    }

    /// Every header name and value, back to back.
    private(set) var storage: [UInt8] = []
    /// Every header in arrival order (pseudo-headers included).
    private(set) var fields: [Field] = []
    /// Index into ``fields`` of each known header (`-1` when absent).
    private var known: (Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16) = (-1, -1, -1, -1, -1, -1, -1, -1, -1)
    /// A known header arrived twice.
    private(set) var duplicate: Known? = nil
    /// The first bytes of the body (up to ``bodyLimit``).
    private(set) var body: [UInt8] = []
    /// The body's full length, even past ``bodyLimit``.
    private(set) var bodyLength = 0
    /// How much of the body is kept (more than the largest payload APNs accepts).
    static let bodyLimit = 5121

    init() {
        storage.reserveCapacity(1024)
        fields.reserveCapacity(16)
        body.reserveCapacity(1024)
    }

    /// A request from strings (for tests and tools).
    init(method: String = "POST", path: String, headers: [(String, String)] = [], body: String = "") {
        self.init()
        append(name: ":method", value: method)
        append(name: ":path", value: path)
        for (n, v) in headers { append(name: n, value: v) }
        var b = Array(body.utf8)
        b.withUnsafeMutableBytes { appendBody(UnsafeRawBufferPointer($0)) }
    }

    /// Empties the request for reuse, keeping its buffers' capacity.
    mutating func reset() {
        storage.removeAll(keepingCapacity: true)
        fields.removeAll(keepingCapacity: true)
        known = (-1, -1, -1, -1, -1, -1, -1, -1, -1)
        duplicate = nil
        body.removeAll(keepingCapacity: true)
        bodyLength = 0
    }

    /// Adds one header.
    mutating func append(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        let field = Field(nameStart: Int32(storage.count), nameLength: Int32(name.count),
                          valueStart: Int32(storage.count + name.count), valueLength: Int32(value.count))
        storage.append(contentsOf: name)
        storage.append(contentsOf: value)
        if let k = Known.match(name) {
            if index(k) >= 0 {
                if duplicate == nil { duplicate = k }
            } else {
                setIndex(k, Int16(truncatingIfNeeded: fields.count))
            }
        }
        fields.append(field)
    }

    mutating func append(name: String, value: String) {
        var n = name, v = value
        n.withUTF8 { nb in v.withUTF8 { vb in append(name: UnsafeRawBufferPointer(nb), value: UnsafeRawBufferPointer(vb)) } }
    }

    /// Adds body bytes (keeps at most ``bodyLimit``).
    mutating func appendBody(_ chunk: UnsafeRawBufferPointer) {
        bodyLength += chunk.count
        let room = Self.bodyLimit - body.count
        if room > 0 { body.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk.prefix(room))) }
    }

    private func index(_ k: Known) -> Int {
        switch k {
        case .method: return Int(known.0)
        case .path: return Int(known.1)
        case .authorization: return Int(known.2)
        case .apnsID: return Int(known.3)
        case .apnsTopic: return Int(known.4)
        case .apnsPushType: return Int(known.5)
        case .apnsPriority: return Int(known.6)
        case .apnsExpiration: return Int(known.7)
        case .apnsCollapseID: return Int(known.8)
        }
    }

    private mutating func setIndex(_ k: Known, _ i: Int16) {
        switch k {
        case .method: known.0 = i
        case .path: known.1 = i
        case .authorization: known.2 = i
        case .apnsID: known.3 = i
        case .apnsTopic: known.4 = i
        case .apnsPushType: known.5 = i
        case .apnsPriority: known.6 = i
        case .apnsExpiration: known.7 = i
        case .apnsCollapseID: known.8 = i
        }
    }

    /// Whether the known header is present.
    func has(_ k: Known) -> Bool { index(k) >= 0 }

    /// The value range of a known header in ``storage``.
    func valueRange(_ k: Known) -> Range<Int>? {
        let i = index(k)
        guard i >= 0 else { return nil }
        let f = fields[i]
        return Int(f.valueStart)..<Int(f.valueStart + f.valueLength)
    }

    /// Runs `body` with the bytes of a known header's value (`nil` when absent).
    func withValue<R>(_ k: Known, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let r = valueRange(k) else { return body(nil) }
        return storage.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[r])) }
    }

    /// A known header's value as a string (allocates; not for the hot path).
    func string(_ k: Known) -> String? {
        guard let r = valueRange(k) else { return nil }
        return String(decoding: storage[r], as: UTF8.self)
    }

    /// Every header as strings, in arrival order (allocates; for recording).
    var headerPairs: [(name: String, value: String)] {
        fields.map { f in
            (String(decoding: storage[Int(f.nameStart)..<Int(f.nameStart + f.nameLength)], as: UTF8.self),
             String(decoding: storage[Int(f.valueStart)..<Int(f.valueStart + f.valueLength)], as: UTF8.self))
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
