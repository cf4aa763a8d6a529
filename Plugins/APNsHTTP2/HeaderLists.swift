import CCurl
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// The headers every request of one "shape" shares, as a libcurl header list built once.
///
/// A shape is what varies per notification, not per device: push type, topic, priority,
/// expiration, collapse id and the provider token. A campaign to 100,000 devices builds one
/// list. Each easy handle puts its own `apns-id` node in front (see ``RequestHeaders``), so
/// no header allocation happens per request.
final class HeaderShape {
    struct Key: Hashable {
        var pushType: PushType
        var topic: String
        var priority: Int
        var expiration: Int64?
        var collapseID: String?
        var authorization: String?
    }

    let key: Key
    /// Requests using this list that have not finished yet (engine thread only).
    var inUse = 0
    private(set) var list: UnsafeMutablePointer<curl_slist>?

    init(_ key: Key) {
        self.key = key
        var lines = [
            "apns-push-type: \(key.pushType.rawValue)",
            "apns-topic: \(key.topic)",
            "apns-priority: \(key.priority)",
        ]
        if let e = key.expiration { lines.append("apns-expiration: \(e)") }
        if let c = key.collapseID { lines.append("apns-collapse-id: \(c)") }
        if let a = key.authorization { lines.append("authorization: \(a)") }
        // Drop headers libcurl would add on its own for a POST.
        lines += ["Content-Type:", "Accept:", "Expect:"]
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for line in lines { list = curl_slist_append(list, line) }
        self.list = list
    }

    deinit { curl_slist_free_all(list) }
}

/// An easy handle's own first header node, `apns-id: <uuid>`, rewritten in place per request
/// and chained in front of a shared ``HeaderShape`` list.
final class RequestHeaders {
    private static let prefix = Array("apns-id: ".utf8)
    /// Lower-case hex digits; a static string's bytes, so writing an id allocates nothing.
    private static let digits: StaticString = "0123456789abcdef"
    private let node: UnsafeMutablePointer<curl_slist>
    private let text: UnsafeMutablePointer<CChar>

    init() {
        node = UnsafeMutablePointer<curl_slist>.allocate(capacity: 1)
        let length = Self.prefix.count + 36 + 1
        text = UnsafeMutablePointer<CChar>.allocate(capacity: length)
        text.initialize(repeating: 0, count: length)
        for (i, b) in Self.prefix.enumerated() { text[i] = CChar(bitPattern: b) }
        node.initialize(to: curl_slist(data: text, next: nil))
    }

    deinit {
        text.deallocate()
        node.deallocate()
    }

    /// The list for one request: this `apns-id` node, then the shape's headers.
    func list(apnsID: UUID, shape: HeaderShape) -> UnsafeMutablePointer<curl_slist> {
        let digits = Self.digits.utf8Start
        var i = Self.prefix.count
        withUnsafeBytes(of: apnsID.uuid) { bytes in
            for (n, byte) in bytes.enumerated() {
                if n == 4 || n == 6 || n == 8 || n == 10 { text[i] = 45; i += 1 }  // "-"
                text[i] = CChar(bitPattern: digits[Int(byte >> 4)])
                text[i + 1] = CChar(bitPattern: digits[Int(byte & 0x0F)])
                i += 2
            }
        }
        text[i] = 0
        node.pointee.next = shape.list
        return node
    }
}
