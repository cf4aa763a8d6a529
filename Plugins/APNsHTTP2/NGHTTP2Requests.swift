import CNGHTTP2
import FoundationEssentials
import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// The header fields every request of one shape shares (see ``HeaderShape``), as nghttp2 name/value
/// pairs over bytes this object owns, built once: pseudo-headers first, then the APNs headers.
///
/// - Important: the pairs are passed without copying (`NGHTTP2_NV_FLAG_NO_COPY_*`); a stream
///   holds its shape until it closes.
final class NGHeaderShape {
    let key: HeaderShape.Key
    /// Requests using this shape whose streams have not closed (engine thread only).
    var inUse = 0
    /// `:method`, `:scheme`, `:authority`.
    let pseudo: UnsafeMutablePointer<nghttp2_nv>
    /// `apns-push-type`, `apns-topic`, `apns-priority`, then the optional ones.
    let fields: UnsafeMutablePointer<nghttp2_nv>
    let fieldCount: Int
    private let storage: UnsafeMutableRawPointer

    static let pseudoCount = 3

    init(_ key: HeaderShape.Key, authority: String) {
        self.key = key
        var pairs: [(String, String)] = [(":method", "POST"), (":scheme", "https"), (":authority", authority),
                                         ("apns-push-type", key.pushType.rawValue), ("apns-topic", key.topic),
                                         ("apns-priority", String(key.priority))]
        if let e = key.expiration { pairs.append(("apns-expiration", String(e))) }
        if let c = key.collapseID { pairs.append(("apns-collapse-id", c)) }
        if let a = key.authorization { pairs.append(("authorization", a)) }
        let size = pairs.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count }
        storage = .allocate(byteCount: max(size, 1), alignment: 1)
        pseudo = .allocate(capacity: Self.pseudoCount)
        fieldCount = pairs.count - Self.pseudoCount
        fields = .allocate(capacity: fieldCount)
        var offset = 0
        func place(_ s: String) -> (UnsafeMutablePointer<UInt8>, Int) {
            let start = (storage + offset).assumingMemoryBound(to: UInt8.self)
            let bytes = Array(s.utf8)
            bytes.withUnsafeBytes { (storage + offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            offset += bytes.count
            return (start, bytes.count)
        }
        for (i, (name, value)) in pairs.enumerated() {
            let (n, nl) = place(name)
            let (v, vl) = place(value)
            let nv = nghttp2_nv(name: n, value: v, namelen: nl, valuelen: vl, flags: herald_h2_nv_flags(1))
            if i < Self.pseudoCount { pseudo[i] = nv } else { fields[i - Self.pseudoCount] = nv }
        }
    }

    deinit {
        storage.deallocate()
        pseudo.deallocate()
        fields.deallocate()
    }
}

/// One stream's state, reused for request after request: the request, its per-request header
/// bytes (`:path`, `apns-id`, `content-length`) and name/value array, and the answer.
final class NGStream {
    var request: PendingRequest?
    var shape: NGHeaderShape?
    var streamID: Int32 = 0
    /// Where the stream sits in the engine's list of streams on the connection (-1: not on it).
    var slot = -1
    var status = 0
    var retryAfter: TimeInterval?
    private(set) var body: [UInt8] = []
    /// Payload bytes handed to nghttp2 so far.
    var sent = 0
    private(set) var nva: UnsafeMutablePointer<nghttp2_nv>
    private(set) var nvCount = 0
    private var nvCapacity = 16
    private var text: UnsafeMutablePointer<UInt8>
    private var textCapacity = 256

    private static let pathPrefix = Array("/3/device/".utf8)
    private static let digits: StaticString = "0123456789abcdef"

    init() {
        nva = .allocate(capacity: nvCapacity)
        text = .allocate(capacity: textCapacity)
        body.reserveCapacity(256)
    }

    deinit {
        nva.deallocate()
        text.deallocate()
    }

    /// Binds `r` and writes its header array (no allocation unless a token is unusually long).
    func prepare(_ r: PendingRequest, shape: NGHeaderShape) {
        request = r
        self.shape = shape
        streamID = 0
        status = 0
        retryAfter = nil
        sent = 0
        body.removeAll(keepingCapacity: true)
        let tokenLength = r.delivery.token.utf8.count
        let needed = Self.pathPrefix.count + tokenLength + 36 + 20
        if needed > textCapacity {
            text.deallocate()
            textCapacity = needed * 2
            text = .allocate(capacity: textCapacity)
        }
        if NGHeaderShape.pseudoCount + shape.fieldCount + 3 > nvCapacity {
            nva.deallocate()
            nvCapacity = NGHeaderShape.pseudoCount + shape.fieldCount + 3
            nva = .allocate(capacity: nvCapacity)
        }
        var n = 0
        for i in 0..<NGHeaderShape.pseudoCount { nva[n] = shape.pseudo[i]; n += 1 }
        // :path
        var at = 0
        for b in Self.pathPrefix { text[at] = b; at += 1 }
        var token = r.delivery.token
        token.withUTF8 { bytes in for b in bytes { text[at] = b; at += 1 } }
        nva[n] = Self.pair(":path", text, at, index: false); n += 1
        for i in 0..<shape.fieldCount { nva[n] = shape.fields[i]; n += 1 }
        // apns-id
        let idStart = text + at
        let digits = Self.digits.utf8Start
        withUnsafeBytes(of: r.delivery.messageID.uuid) { bytes in
            for (k, byte) in bytes.enumerated() {
                if k == 4 || k == 6 || k == 8 || k == 10 { text[at] = 45; at += 1 }  // "-"
                text[at] = digits[Int(byte >> 4)]
                text[at + 1] = digits[Int(byte & 0x0F)]
                at += 2
            }
        }
        nva[n] = Self.pair("apns-id", idStart, 36, index: false); n += 1
        // content-length
        let lengthStart = text + at
        var count = r.payload.count
        var reversed = 0, length = 0
        repeat { reversed = reversed * 10 + count % 10; count /= 10; length += 1 } while count > 0
        for _ in 0..<length { text[at] = UInt8(48 + reversed % 10); reversed /= 10; at += 1 }
        nva[n] = Self.pair("content-length", lengthStart, length, index: true); n += 1
        nvCount = n
    }

    private static func pair(_ name: StaticString, _ value: UnsafeMutablePointer<UInt8>, _ length: Int, index: Bool) -> nghttp2_nv {
        nghttp2_nv(name: UnsafeMutablePointer(mutating: name.utf8Start), value: value,
                   namelen: name.utf8CodeUnitCount, valuelen: length, flags: herald_h2_nv_flags(index ? 1 : 0))
    }

    /// A response header: `:status` and `retry-after` matter (APNs echoes the `apns-id` sent).
    func header(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        if name.count == 7, name[0] == UInt8(ascii: ":") {
            var s = 0
            for b in value where b >= 48 && b <= 57 { s = s * 10 + Int(b - 48) }
            status = s
        } else if name.count == 11, name[0] == UInt8(ascii: "r"), name.elementsEqual("retry-after".utf8) {
            var seconds = 0
            for b in value {
                guard b >= 48 && b <= 57 else { return }  // an HTTP date: not what APNs sends; ignore
                seconds = seconds * 10 + Int(b - 48)
            }
            retryAfter = TimeInterval(seconds)
        }
    }

    func append(_ data: UnsafeBufferPointer<UInt8>) {
        if body.count < 16_384 { body.append(contentsOf: data) }
    }

    /// Copies the next part of the payload into nghttp2's buffer; whether it was the last.
    func readBody(into buffer: UnsafeMutablePointer<UInt8>, length: Int) -> (Int, Bool) {
        guard let r = request else { return (0, true) }
        let n = min(length, r.payload.count - sent)
        if n > 0 { UnsafeMutableRawPointer(buffer).copyMemory(from: r.payload.base + sent, byteCount: n) }
        sent += n
        return (n, sent >= r.payload.count)
    }
}
