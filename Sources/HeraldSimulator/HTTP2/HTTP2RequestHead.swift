/// One HTTP/2 request as the simulator received it: header bytes, known fields, and the body.
///
/// Built by the nghttp2 glue without a `String` per header: every name and value is appended to
/// one reusable byte buffer, and the headers APNs defines are remembered as ranges into it.
/// Tests build one from strings with ``init(method:path:headers:body:)``.
final class HTTP2RequestHead {
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
        /// Broadcasts (iOS 18): the channel, and the request id that takes `apns-id`'s place.
        case apnsChannelID, apnsRequestID

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
            case .apnsChannelID: return "apns-channel-id"
            case .apnsRequestID: return "apns-request-id"
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
                if equal(name, Known.apnsExpiration.name) { return .apnsExpiration }
                if equal(name, Known.apnsChannelID.name) { return .apnsChannelID }
                return equal(name, Known.apnsRequestID.name) ? .apnsRequestID : nil
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

    /// Every stored header name and value, back to back.
    private(set) var storage: UnsafeMutableRawBufferPointer
    private var storageCount = 0
    /// The stored headers in arrival order (pseudo-headers included).
    private var fieldBuffer: UnsafeMutableBufferPointer<Field>
    private(set) var fieldCount = 0
    /// Index into the fields of each known header (`-1` when absent).
    private var known: (Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16) =
        (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)
    /// A known header arrived twice.
    private(set) var duplicate: Known? = nil
    /// Whether headers the validator does not read are kept too (for recording).
    var keepsAllHeaders = true
    private let bodyBuffer: UnsafeMutableRawBufferPointer
    private var bodyCount = 0
    /// The body's full length, even past ``bodyLimit``.
    private(set) var bodyLength = 0
    /// How much of the body is kept (more than the largest payload APNs accepts).
    static let bodyLimit = 5121

    init() {
        storage = .allocate(byteCount: 1024, alignment: 8)
        fieldBuffer = .allocate(capacity: 16)
        bodyBuffer = .allocate(byteCount: Self.bodyLimit, alignment: 8)
    }

    deinit {
        storage.deallocate()
        fieldBuffer.deallocate()
        bodyBuffer.deallocate()
    }

    /// A request from strings (for tests and tools).
    convenience init(method: String = "POST", path: String, headers: [(String, String)] = [], body: String = "") {
        self.init()
        append(name: ":method", value: method)
        append(name: ":path", value: path)
        for (n, v) in headers { append(name: n, value: v) }
        var b = body
        b.withUTF8 { appendBody(UnsafeRawBufferPointer($0)) }
    }

    /// Empties the request for reuse, keeping its buffers.
    func reset() {
        storageCount = 0
        fieldCount = 0
        known = (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)
        duplicate = nil
        bodyCount = 0
        bodyLength = 0
    }

    /// Adds one header.
    func append(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        let k = Known.match(name)
        if k == nil && !keepsAllHeaders { return }
        let needed = storageCount + name.count + value.count
        if needed > storage.count {
            let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(needed, storage.count * 2), alignment: 8)
            bigger.baseAddress!.copyMemory(from: storage.baseAddress!, byteCount: storageCount)
            storage.deallocate()
            storage = bigger
        }
        if fieldCount == fieldBuffer.count {
            let bigger = UnsafeMutableBufferPointer<Field>.allocate(capacity: fieldBuffer.count * 2)
            _ = bigger.initialize(fromContentsOf: fieldBuffer)
            fieldBuffer.deallocate()
            fieldBuffer = bigger
        }
        let base = storage.baseAddress!
        if name.count > 0 { (base + storageCount).copyMemory(from: name.baseAddress!, byteCount: name.count) }
        if value.count > 0 { (base + storageCount + name.count).copyMemory(from: value.baseAddress!, byteCount: value.count) }
        fieldBuffer[fieldCount] = Field(nameStart: Int32(storageCount), nameLength: Int32(name.count),
                                        valueStart: Int32(storageCount + name.count), valueLength: Int32(value.count))
        storageCount = needed
        if let k {
            if index(k) >= 0 {
                if duplicate == nil { duplicate = k }
            } else {
                setIndex(k, Int16(truncatingIfNeeded: fieldCount))
            }
        }
        fieldCount += 1
    }

    func append(name: String, value: String) {
        var n = name, v = value
        n.withUTF8 { nb in v.withUTF8 { vb in append(name: UnsafeRawBufferPointer(nb), value: UnsafeRawBufferPointer(vb)) } }
    }

    /// Adds body bytes (keeps at most ``bodyLimit``).
    func appendBody(_ chunk: UnsafeRawBufferPointer) {
        bodyLength += chunk.count
        let n = min(Self.bodyLimit - bodyCount, chunk.count)
        if n > 0 {
            (bodyBuffer.baseAddress! + bodyCount).copyMemory(from: chunk.baseAddress!, byteCount: n)
            bodyCount += n
        }
    }

    /// The kept body bytes.
    var body: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bodyBuffer[0..<bodyCount]) }

    /// Bytes of the header storage.
    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: storage[range]) }

    /// Bytes of the header storage as a string.
    func string(_ range: Range<Int>) -> String { String(decoding: bytes(range), as: UTF8.self) }

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
        case .apnsChannelID: return Int(known.9)
        case .apnsRequestID: return Int(known.10)
        }
    }

    private func setIndex(_ k: Known, _ i: Int16) {
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
        case .apnsChannelID: known.9 = i
        case .apnsRequestID: known.10 = i
        }
    }

    /// Whether the known header is present.
    func has(_ k: Known) -> Bool { index(k) >= 0 }

    /// The value range of a known header in ``storage``.
    func valueRange(_ k: Known) -> Range<Int>? {
        let i = index(k)
        guard i >= 0 else { return nil }
        let f = fieldBuffer[i]
        return Int(f.valueStart)..<Int(f.valueStart + f.valueLength)
    }

    /// The bytes of a known header's value (`nil` when absent); valid until the next change.
    func value(_ k: Known) -> UnsafeRawBufferPointer? {
        valueRange(k).map { bytes($0) }
    }

    /// A known header's value as a string (allocates; not for the hot path).
    func string(_ k: Known) -> String? {
        valueRange(k).map { string($0) }
    }

    /// Every stored header as strings, in arrival order (allocates; for recording).
    var headerPairs: [(name: String, value: String)] {
        (0..<fieldCount).map { i in
            let f = fieldBuffer[i]
            return (string(Int(f.nameStart)..<Int(f.nameStart + f.nameLength)),
                    string(Int(f.valueStart)..<Int(f.valueStart + f.valueLength)))
        }
    }
}

#if canImport(Glibc)
import Glibc
#endif
