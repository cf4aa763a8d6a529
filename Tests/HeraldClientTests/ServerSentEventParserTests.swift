import HeraldClient
import Testing

/// The HTML Standard's event stream interpretation (§9.2.6), case by case, without a network.
@Suite struct ServerSentEventParserTests {
    typealias Output = ServerSentEventParser.Output

    /// Every output of `text` fed at once.
    static func parse(_ text: String, lastEventID: String = "") -> [Output] {
        var p = ServerSentEventParser(lastEventID: lastEventID)
        return p.feed(text)
    }

    static func events(_ outputs: [Output]) -> [ServerSentEvent] {
        outputs.compactMap { if case .event(let e) = $0 { return e } else { return nil } }
    }

    @Test func multiLineDataIsJoinedWithLineFeedsAndTheLastOneRemoved() {
        #expect(Self.events(Self.parse("data: first\ndata: second\ndata:\ndata: third\n\n"))
                == [ServerSentEvent(data: "first\nsecond\n\nthird")])
    }

    @Test func anEventWithOnlyAnEmptyDataFieldIsDispatchedWithEmptyData() {
        #expect(Self.events(Self.parse("data\n\n")) == [ServerSentEvent(data: "")])
        #expect(Self.events(Self.parse("data:\n\n")) == [ServerSentEvent(data: "")])
    }

    @Test func aBlockWithoutDataDispatchesNothingAndClearsTheEventType() {
        // `event: x` without data: nothing; the type does not leak into the next event.
        #expect(Self.events(Self.parse("event: x\n\ndata: y\n\n")) == [ServerSentEvent(type: "message", data: "y")])
    }

    @Test func commentsAreReportedAndIgnored() {
        let out = Self.parse(": connected\n\n:heartbeat\ndata: a\n:inside\n\n")
        #expect(out == [.comment("connected"), .comment("heartbeat"), .comment("inside"), .event(ServerSentEvent(data: "a"))])
    }

    @Test func onlyOneLeadingSpaceIsStrippedAfterTheColon() {
        #expect(Self.events(Self.parse("data:  two spaces\n\n")) == [ServerSentEvent(data: " two spaces")])
        #expect(Self.events(Self.parse("data:no space\n\n")) == [ServerSentEvent(data: "no space")])
        #expect(Self.events(Self.parse("data:\tTab\n\n")) == [ServerSentEvent(data: "\tTab")])
        // Only the first colon separates: the value keeps the others.
        #expect(Self.events(Self.parse("data: a: b:c\n\n")) == [ServerSentEvent(data: "a: b:c")])
    }

    @Test func aFieldWithoutAColonHasAnEmptyValue() {
        // "data" alone appends an empty line; "event" alone sets the type to "" (so "message").
        #expect(Self.events(Self.parse("data: x\ndata\n\n")) == [ServerSentEvent(data: "x\n")])
        #expect(Self.events(Self.parse("event: custom\nevent\ndata: x\n\n")) == [ServerSentEvent(type: "message", data: "x")])
        // "id" alone resets the last event id to "".
        var p = ServerSentEventParser()
        _ = p.feed("id: 5\ndata: a\n\n")
        #expect(p.lastEventID == "5")
        #expect(Self.events(p.feed("id\ndata: b\n\n")) == [ServerSentEvent(data: "b", lastEventID: "")])
        #expect(p.lastEventID == "")
    }

    @Test func theEventFieldSetsTheType() {
        #expect(Self.events(Self.parse("event: notification\ndata: {}\n\n")) == [ServerSentEvent(type: "notification", data: "{}")])
        // The last event field wins.
        #expect(Self.events(Self.parse("event: a\nevent: b\ndata: x\n\n")).first?.type == "b")
    }

    @Test func fieldNamesAreCaseSensitiveAndUnknownOnesIgnored() {
        #expect(Self.events(Self.parse("Data: x\nDATA: y\nfoo: z\n\n")) == [])
        #expect(Self.parse("ID: 7\nRetry: 10\n\n") == [])
        // A field name with a leading space is not "data".
        #expect(Self.events(Self.parse(" data: x\n\n")) == [])
    }

    @Test func retryNeedsAsciiDigitsOnly() {
        #expect(Self.parse("retry: 2000\n\n") == [.retry(milliseconds: 2000)])
        #expect(Self.parse("retry:03000\n") == [.retry(milliseconds: 3000)])   // decimal, not octal
        #expect(Self.parse("retry: 0\n") == [.retry(milliseconds: 0)])
        for bogus in ["retry: 1000x\n", "retry: -1\n", "retry: 1.5\n", "retry: +5\n", "retry:\n", "retry\n", "retry:  100\n", "retry: 100 \n", "retry: ١٢\n"] {
            #expect(Self.parse(bogus) == [], "\(bogus.debugDescription)")
        }
        // Too large for Int: still only digits, so it counts (saturated).
        #expect(Self.parse("retry: 99999999999999999999999\n") == [.retry(milliseconds: Int.max)])
    }

    @Test func anIdWithNulIsIgnored() {
        var p = ServerSentEventParser()
        _ = p.feed("id: 3\ndata: a\n\n")
        let out = p.feed("id: 4\u{0}x\ndata: b\n\n")
        #expect(Self.events(out) == [ServerSentEvent(data: "b", lastEventID: "3")])
        #expect(p.lastEventID == "3")
    }

    @Test func theLastEventIDPersistsAcrossEventsAndIsSetEvenWithoutData() {
        var p = ServerSentEventParser()
        let first = Self.events(p.feed("id: 1\ndata: a\n\ndata: b\n\n"))
        #expect(first.map(\.lastEventID) == ["1", "1"])
        // An id-only block dispatches nothing but sets the last event ID string.
        #expect(p.feed("id: 9\n\n") == [])
        #expect(p.lastEventID == "9")
        // Not before the empty line: the buffer is not the string yet.
        _ = p.feed("id: 10\ndata: c\n")
        #expect(p.lastEventID == "9")
        #expect(Self.events(p.feed("\n")) == [ServerSentEvent(data: "c", lastEventID: "10")])
    }

    @Test func aReconnectedStreamStartsFromTheGivenIDOrTheStandardsEmptyOne() {
        // The standard: a new stream's buffer is empty, so its first empty line clears the id.
        var exact = ServerSentEventParser()
        _ = exact.feed("retry: 2000\n\n")
        #expect(exact.lastEventID == "")
        // Seeded (as the client does): the id survives the `retry:` block.
        var seeded = ServerSentEventParser(lastEventID: "41")
        _ = seeded.feed("retry: 2000\n\n: connected\n\n")
        #expect(seeded.lastEventID == "41")
        #expect(Self.events(seeded.feed("data: x\n\n")) == [ServerSentEvent(data: "x", lastEventID: "41")])
    }

    @Test func crlfLfAndCrAllEndLines() {
        let expected = [ServerSentEvent(type: "t", data: "a\nb", lastEventID: "1")]
        #expect(Self.events(Self.parse("id: 1\r\nevent: t\r\ndata: a\r\ndata: b\r\n\r\n")) == expected)
        #expect(Self.events(Self.parse("id: 1\revent: t\rdata: a\rdata: b\r\r")) == expected)
        #expect(Self.events(Self.parse("id: 1\nevent: t\r\ndata: a\rdata: b\n\r\n")) == expected)
        // CR then LF is one line end, CR CR is two (an empty line: dispatch).
        #expect(Self.events(Self.parse("data: x\r\rdata: y\r\n\r\n")) == [ServerSentEvent(data: "x"), ServerSentEvent(data: "y")])
    }

    @Test func aCRLFSplitAcrossReadsIsOneLineEnd() {
        var p = ServerSentEventParser()
        #expect(p.feed("data: a\r") == [])
        #expect(p.feed("\ndata: b\r") == [])
        // Had the LF after the split CR counted as a second line end, "a" would have been dispatched alone.
        #expect(Self.events(p.feed("\n\r\n")) == [ServerSentEvent(data: "a\nb")])
    }

    @Test func aByteOrderMarkAtTheStartIsSkippedOnlyThere() {
        #expect(Self.events(Self.parse("\u{FEFF}data: x\n\n")) == [ServerSentEvent(data: "x")])
        // Split across reads.
        var p = ServerSentEventParser()
        #expect(p.feed([0xEF]) == [])
        #expect(p.feed([0xBB]) == [])
        #expect(Self.events(p.feed([0xBF] + Array("data: y\n\n".utf8))) == [ServerSentEvent(data: "y")])
        // A second BOM is content: it makes the field name "\u{FEFF}data", which is unknown.
        #expect(Self.events(Self.parse("\u{FEFF}\u{FEFF}data: x\n\n")) == [])
        // Not at the start: part of the value.
        #expect(Self.events(Self.parse("data: \u{FEFF}x\n\n")) == [ServerSentEvent(data: "\u{FEFF}x")])
        // A partial BOM is not one: the bytes are content (invalid UTF-8, so U+FFFD).
        var q = ServerSentEventParser()
        #expect(Self.events(q.feed([0xEF, 0xBB] + Array("\ndata: z\n\n".utf8))) == [ServerSentEvent(data: "z")])
    }

    @Test func invalidUTF8BecomesReplacementCharactersAndSplitSequencesJoin() {
        #expect(Self.events(Self.parse("data: a\u{FFFD}b\n\n")) == [ServerSentEvent(data: "a\u{FFFD}b")])
        var p = ServerSentEventParser()
        #expect(Self.events(p.feed([0x64, 0x61, 0x74, 0x61, 0x3A, 0x20, 0xFF, 0x0A, 0x0A])) == [ServerSentEvent(data: "\u{FFFD}")])
        // "é" (C3 A9) split between two reads is still "é".
        var q = ServerSentEventParser()
        #expect(q.feed(Array("data: caf".utf8) + [0xC3]) == [])
        #expect(Self.events(q.feed([0xA9] + Array("\n\n".utf8))) == [ServerSentEvent(data: "café")])
    }

    @Test func anUnterminatedEventAtTheEndIsNotDispatched() {
        var p = ServerSentEventParser()
        #expect(Self.events(p.feed("data: complete\n\ndata: partial\n")) == [ServerSentEvent(data: "complete")])
        // The stream ends here: nothing else comes out, and the id of the partial event is not taken.
        var q = ServerSentEventParser()
        _ = q.feed("id: 8\ndata: partial")
        #expect(q.lastEventID == "")
    }

    @Test func bytesFedOneAtATimeGiveTheSameEventsAsAllAtOnce() {
        let text = "\u{FEFF}retry: 2000\r\n\r\n: connected\n\nid: 1\nevent: notification\ndata: {\"id\":\"a\",\n data: x\ndata: \"alert\":\"hé\"}\r\n\r\nid: 2\rdata: second\r\r"
        var whole = ServerSentEventParser()
        let expected = whole.feed(text)
        var p = ServerSentEventParser()
        var out: [Output] = []
        for b in Array(text.utf8) { out += p.feed([b]) }
        #expect(out == expected)
        #expect(Self.events(out).map(\.lastEventID) == ["1", "2"])
        #expect(Self.events(out).first?.data == "{\"id\":\"a\",\n\"alert\":\"hé\"}")
        #expect(p.lastEventID == "2")
    }

    @Test func heraldsOwnFramingParses() {
        let text = "retry: 2000\n\n: connected\n\nid: 12\nevent: notification\ndata: {\"id\":\"n1\",\"app\":\"com.example.app\"}\n\n: heartbeat\n\n"
        #expect(Self.parse(text) == [.retry(milliseconds: 2000), .comment("connected"),
                                     .event(ServerSentEvent(type: "notification", data: "{\"id\":\"n1\",\"app\":\"com.example.app\"}", lastEventID: "12")),
                                     .comment("heartbeat")])
    }
}
