/// One event of a `text/event-stream`, as the HTML Standard's event stream interpretation
/// dispatches it.
public struct ServerSentEvent: Sendable, Equatable {
    /// The event type: the last `event:` field's value, `"message"` when the event had none.
    public var type: String
    /// The `data:` lines joined with LF (the final LF removed).
    public var data: String
    /// The stream's last event ID string when the event was dispatched (an `id:` field persists
    /// across events until the next one sets it; empty when none was ever given).
    public var lastEventID: String

    /// Creates an event.
    public init(type: String = "message", data: String, lastEventID: String = "") {
        self.type = type
        self.data = data
        self.lastEventID = lastEventID
    }
}

/// An incremental parser of Server-Sent Events, implementing the HTML Standard's "Parsing an
/// event stream" and "Interpreting an event stream" exactly (§9.2.5, §9.2.6).
///
/// Bytes go in as they arrive, split anywhere (inside a line, a UTF-8 sequence, a CRLF pair or the
/// byte order mark); what they complete comes out in stream order:
/// - lines end with CRLF, LF or CR; one leading U+FEFF BOM is skipped; invalid UTF-8 decodes to
///   U+FFFD;
/// - an empty line dispatches the event: the last event ID string is set from the `id` buffer,
///   then, when the data buffer is empty, the buffers are cleared and nothing is dispatched;
///   otherwise its final LF is removed and the event goes out with its type (`"message"` when no
///   `event:` field came);
/// - a line starting with `:` is a comment; a line without a colon is a field name with an empty
///   value; after the first colon, one leading space is removed from the value;
/// - `event` sets the type, `data` appends the value and an LF, `id` sets the ID buffer unless the
///   value contains U+0000, `retry` sets the reconnection time when the value is ASCII digits
///   only; other field names are ignored;
/// - at the end of the stream, an event not terminated by an empty line is discarded (call
///   nothing: just drop the parser).
///
/// - Important: the standard initialises the last event ID buffer to the empty string for each
///   stream, so a reconnected stream's first empty line resets the last event ID string. Passing
///   the previous connection's ID to ``init(lastEventID:)`` keeps it instead (as Chromium's
///   parser does); the default follows the standard to the letter.
public struct ServerSentEventParser: Sendable {
    /// What the stream produced, in order.
    public enum Output: Sendable, Equatable {
        /// A dispatched event.
        case event(ServerSentEvent)
        /// A `retry:` field with a valid value: the new reconnection time, in milliseconds.
        case retry(milliseconds: Int)
        /// A comment line's text after the colon (one leading space removed), e.g. `heartbeat`.
        case comment(String)
    }

    /// The last event ID string (what a reconnect sends as `Last-Event-ID` when not empty):
    /// updated each time an empty line is read, whether or not an event is dispatched.
    public private(set) var lastEventID: String

    private var line: [UInt8] = []
    private var sawCR = false
    /// Bytes of the stream seen so far, up to 3 (for the byte order mark).
    private var start: [UInt8] = []
    private var startDone = false
    private var data = ""
    private var eventType = ""
    private var idBuffer: String

    /// Creates a parser for one stream.
    /// - Parameter lastEventID: the last event ID buffer's and string's initial value (see the
    ///   type's note; the standard's is empty).
    public init(lastEventID: String = "") {
        self.lastEventID = lastEventID
        self.idBuffer = lastEventID
    }

    /// Feeds the next bytes of the stream.
    /// - Returns: what they completed, in stream order.
    public mutating func feed<Bytes: Sequence>(_ bytes: Bytes) -> [Output] where Bytes.Element == UInt8 {
        var out: [Output] = []
        for b in bytes {
            if !startDone {
                // One leading BOM (EF BB BF) is ignored; anything else is stream content.
                start.append(b)
                let bom: [UInt8] = [0xEF, 0xBB, 0xBF]
                if start == Array(bom.prefix(start.count)) {
                    if start.count == 3 {
                        start = []
                        startDone = true
                    }
                    continue
                }
                startDone = true
                let pending = start
                start = []
                for p in pending { byte(p, into: &out) }
                continue
            }
            byte(b, into: &out)
        }
        return out
    }

    /// Feeds the next text of the stream (its UTF-8 bytes).
    public mutating func feed(_ text: String) -> [Output] { feed(Array(text.utf8)) }

    private mutating func byte(_ b: UInt8, into out: inout [Output]) {
        switch b {
        case 0x0A:
            if sawCR {
                // The LF of a CRLF pair: the line already ended at the CR.
                sawCR = false
                return
            }
            endLine(into: &out)
        case 0x0D:
            sawCR = true
            endLine(into: &out)
        default:
            sawCR = false
            line.append(b)
        }
    }

    private mutating func endLine(into out: inout [Output]) {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            dispatch(into: &out)
            return
        }
        let colon = UInt8(ascii: ":")
        if line[0] == colon {
            let start = line.count > 1 && line[1] == UInt8(ascii: " ") ? 2 : 1
            out.append(.comment(Self.text(line[start...])))
            return
        }
        guard let c = line.firstIndex(of: colon) else {
            process(field: Self.text(line[...]), value: "", into: &out)
            return
        }
        var valueStart = c + 1
        if valueStart < line.count && line[valueStart] == UInt8(ascii: " ") { valueStart += 1 }
        process(field: Self.text(line[..<c]), value: Self.text(line[valueStart...]), into: &out)
    }

    private mutating func process(field: String, value: String, into out: inout [Output]) {
        switch field {
        case "event":
            eventType = value
        case "data":
            data += value
            data += "\n"
        case "id":
            if !value.unicodeScalars.contains("\u{0}") { idBuffer = value }
        case "retry":
            if !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
                // Digits only; a value too large for Int saturates rather than being ignored.
                out.append(.retry(milliseconds: Int(value) ?? Int.max))
            }
        default:
            break
        }
    }

    private mutating func dispatch(into out: inout [Output]) {
        lastEventID = idBuffer
        guard !data.isEmpty else {
            data = ""
            eventType = ""
            return
        }
        if data.hasSuffix("\n") { data.removeLast() }
        out.append(.event(ServerSentEvent(type: eventType.isEmpty ? "message" : eventType, data: data, lastEventID: lastEventID)))
        data = ""
        eventType = ""
    }

    /// UTF-8 decoding with U+FFFD for invalid sequences (the standard's "UTF-8 decode").
    private static func text(_ bytes: ArraySlice<UInt8>) -> String { String(decoding: bytes, as: UTF8.self) }
}
