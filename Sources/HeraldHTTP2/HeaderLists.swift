internal import CCurl
import FoundationEssentials
import Glibc
import HeraldCore

/// The headers every request of one shape (``ShapeKey``) shares, as a libcurl header list built once.
///
/// A campaign to 100,000 devices builds one list. Each easy handle puts its own nodes (the
/// request's ``HTTP2Request/ownHeaders``) in front (see ``RequestHeaders``), so no header list is
/// allocated per request.
final class HeaderShape {
    let key: ShapeKey
    /// Requests using this list that have not finished yet (engine thread only).
    var inUse = 0
    private(set) var list: UnsafeMutablePointer<curl_slist>?

    init(_ key: ShapeKey) {
        self.key = key
        var lines: [String] = []
        var names = Set<String>()
        for h in key.headers + key.added {
            lines.append(h.value.isEmpty ? "\(h.name);" : "\(h.name): \(h.value)")
            names.insert(h.name)
        }
        // Drop headers libcurl would add on its own for a POST (unless the caller set them).
        for (name, line) in [("content-type", "Content-Type:"), ("accept", "Accept:"), ("expect", "Expect:")] where !names.contains(name) {
            lines.append(line)
        }
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for line in lines { list = curl_slist_append(list, line) }
        self.list = list
    }

    deinit { curl_slist_free_all(list) }
}

/// An easy handle's own header nodes, one per ``HTTP2Request/ownHeaders`` entry, rewritten in
/// place per request and chained in front of a shared ``HeaderShape`` list.
final class RequestHeaders {
    private final class Node {
        let node: UnsafeMutablePointer<curl_slist>
        var text: UnsafeMutablePointer<CChar>
        var capacity: Int

        init() {
            capacity = 64
            node = .allocate(capacity: 1)
            text = .allocate(capacity: capacity)
            text[0] = 0
            node.initialize(to: curl_slist(data: text, next: nil))
        }

        deinit {
            text.deallocate()
            node.deallocate()
        }

        /// Writes `name: value` (or `name;` for an empty value, libcurl's way to send one).
        func write(_ header: HTTP2Header) {
            var name = header.name, value = header.value
            let needed = name.utf8.count + value.utf8.count + 3
            if needed > capacity {
                text.deallocate()
                capacity = needed * 2
                text = .allocate(capacity: capacity)
                node.pointee.data = text
            }
            var at = 0
            name.withUTF8 { for b in $0 { text[at] = CChar(bitPattern: b); at += 1 } }
            if value.isEmpty {
                text[at] = 59; at += 1  // ";"
            } else {
                text[at] = 58; text[at + 1] = 32; at += 2  // ": "
                value.withUTF8 { for b in $0 { text[at] = CChar(bitPattern: b); at += 1 } }
            }
            text[at] = 0
        }
    }

    private var nodes: [Node] = []

    /// The list for one request: its own headers, then the shape's.
    func list(own: [HTTP2Header], shape: HeaderShape) -> UnsafeMutablePointer<curl_slist>? {
        guard !own.isEmpty else { return shape.list }
        while nodes.count < own.count { nodes.append(Node()) }
        for (i, header) in own.enumerated() {
            nodes[i].write(header)
            nodes[i].node.pointee.next = i + 1 < own.count ? nodes[i + 1].node : shape.list
        }
        return nodes[0].node
    }
}
