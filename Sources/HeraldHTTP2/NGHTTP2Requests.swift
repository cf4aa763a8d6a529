internal import CNGHTTP2
import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// The header fields every request of one shape shares (``ShapeKey``), as nghttp2 name/value
/// pairs over bytes this object owns, built once: pseudo-headers first, then the shared headers
/// and those the hooks added.
///
/// - Important: the pairs are passed without copying (`NGHTTP2_NV_FLAG_NO_COPY_*`); a stream
///   holds its shape until it closes.
final class NGHeaderShape {
    let key: ShapeKey
    /// Requests using this shape whose streams have not closed (engine thread only).
    var inUse = 0
    /// `:method`, `:scheme`, `:authority`.
    let pseudo: UnsafeMutablePointer<nghttp2_nv>
    /// The shared headers, then the added ones.
    let fields: UnsafeMutablePointer<nghttp2_nv>
    let fieldCount: Int
    private let storage: UnsafeMutableRawPointer

    static let pseudoCount = 3

    init(_ key: ShapeKey, authority: String) {
        self.key = key
        var pairs: [(String, String)] = [(":method", key.method), (":scheme", "https"), (":authority", authority)]
        for h in key.headers + key.added { pairs.append((h.name, h.value)) }
        let size = pairs.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count }
        storage = .allocate(byteCount: max(size, 1), alignment: 1)
        pseudo = .allocate(capacity: Self.pseudoCount)
        fieldCount = pairs.count - Self.pseudoCount
        fields = .allocate(capacity: max(fieldCount, 1))
        var offset = 0
        func place(_ s: String) -> (UnsafeMutablePointer<UInt8>, Int) {
            let start = (storage + offset).assumingMemoryBound(to: UInt8.self)
            let bytes = Array(s.utf8)
            bytes.withUnsafeBytes { if let b = $0.baseAddress { (storage + offset).copyMemory(from: b, byteCount: $0.count) } }
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
/// bytes (`:path`, its own headers, `content-length`) and name/value array, and the answer.
final class NGStream {
    var request: PendingRequest?
    var shape: NGHeaderShape?
    var streamID: Int32 = 0
    /// Where the stream sits in the engine's list of streams on the connection (-1: not on it).
    var slot = -1
    var status = 0
    private(set) var headers: [HTTP2Header] = []
    private(set) var body: [UInt8] = []
    /// Body bytes handed to nghttp2 so far.
    var sent = 0
    private(set) var nva: UnsafeMutablePointer<nghttp2_nv>
    private(set) var nvCount = 0
    private var nvCapacity = 16
    private var text: UnsafeMutablePointer<UInt8>
    private var textCapacity = 256

    init() {
        nva = .allocate(capacity: nvCapacity)
        text = .allocate(capacity: textCapacity)
        body.reserveCapacity(256)
    }

    deinit {
        nva.deallocate()
        text.deallocate()
    }

    /// Binds `r` and writes its header array (no allocation unless a request is unusually large).
    func prepare(_ r: PendingRequest, shape: NGHeaderShape) {
        request = r
        self.shape = shape
        streamID = 0
        status = 0
        sent = 0
        body.removeAll(keepingCapacity: true)
        headers.removeAll(keepingCapacity: true)
        let q = r.request
        var needed = q.path.utf8.count + 20
        for h in q.ownHeaders { needed += h.name.utf8.count + h.value.utf8.count }
        if needed > textCapacity {
            text.deallocate()
            textCapacity = needed * 2
            text = .allocate(capacity: textCapacity)
        }
        let count = NGHeaderShape.pseudoCount + 1 + shape.fieldCount + q.ownHeaders.count + 1
        if count > nvCapacity {
            nva.deallocate()
            nvCapacity = count
            nva = .allocate(capacity: nvCapacity)
        }
        var n = 0
        for i in 0..<NGHeaderShape.pseudoCount { nva[n] = shape.pseudo[i]; n += 1 }
        var at = 0
        func place(_ s: String) -> (UnsafeMutablePointer<UInt8>, Int) {
            var s = s
            let start = at
            s.withUTF8 { for b in $0 { text[at] = b; at += 1 } }
            return (text + start, at - start)
        }
        let (path, pathLength) = place(q.path)
        nva[n] = Self.pair(":path", path, pathLength, index: false); n += 1
        for i in 0..<shape.fieldCount { nva[n] = shape.fields[i]; n += 1 }
        for h in q.ownHeaders {
            let (name, nameLength) = place(h.name)
            let (value, valueLength) = place(h.value)
            // Values that change with every request: never indexed (no churn in the HPACK table).
            nva[n] = nghttp2_nv(name: name, value: value, namelen: nameLength, valuelen: valueLength, flags: herald_h2_nv_flags(0))
            n += 1
        }
        // content-length
        let lengthStart = text + at
        var remaining = q.body.count
        var reversed = 0, length = 0
        repeat { reversed = reversed * 10 + remaining % 10; remaining /= 10; length += 1 } while remaining > 0
        for _ in 0..<length { text[at] = UInt8(48 + reversed % 10); reversed /= 10; at += 1 }
        nva[n] = Self.pair("content-length", lengthStart, length, index: true); n += 1
        nvCount = n
    }

    private static func pair(_ name: StaticString, _ value: UnsafeMutablePointer<UInt8>, _ length: Int, index: Bool) -> nghttp2_nv {
        nghttp2_nv(name: UnsafeMutablePointer(mutating: name.utf8Start), value: value,
                   namelen: name.utf8CodeUnitCount, valuelen: length, flags: herald_h2_nv_flags(index ? 1 : 0))
    }

    /// A response header: `:status` becomes ``status``; the others are kept (nghttp2 checked
    /// that names are lowercase).
    func header(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        if name.count == 7, name[0] == UInt8(ascii: ":") {
            var s = 0
            for b in value where b >= 48 && b <= 57 { s = s * 10 + Int(b - 48) }
            status = s
        } else {
            headers.append(HTTP2Header(lowercased: String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
        }
    }

    func append(_ data: UnsafeBufferPointer<UInt8>) {
        if body.count < HTTP2Response.bodyLimit { body.append(contentsOf: data.prefix(HTTP2Response.bodyLimit - body.count)) }
    }

    /// Copies the next part of the body into nghttp2's buffer; whether it was the last.
    func readBody(into buffer: UnsafeMutablePointer<UInt8>, length: Int) -> (Int, Bool) {
        guard let r = request else { return (0, true) }
        let body = r.request.body
        let n = min(length, body.count - sent)
        if n > 0 { UnsafeMutableRawPointer(buffer).copyMemory(from: body.base + sent, byteCount: n) }
        sent += n
        return (n, sent >= body.count)
    }
}
