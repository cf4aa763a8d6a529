@testable import HeraldServer
import Testing

/// The HTTP server's connection bookkeeping: deadlines, the per-address limit and shedding.
/// (Every test socket comes from loopback, which the per-address limit exempts, so the limit
/// itself is asserted here, on the table the accept callback asks.)
@Suite struct ConnectionTableTests {
    static let limits = ConnectionTable.Limits(headerTimeout: 10, bodyTimeout: 20, idleTimeout: 60, perAddress: 2)
    /// 203.0.113.7 and 198.51.100.1 (IPv4-mapped), ::1 and 127.0.0.2.
    static let remote = ConnectionTable.Peer(high: 0, low: 0xffff_cb00_7107)
    static let other = ConnectionTable.Peer(high: 0, low: 0xffff_c633_6401)
    static let loopback6 = ConnectionTable.Peer(high: 0, low: 1)
    static let loopback4 = ConnectionTable.Peer(high: 0, low: 0xffff_7f00_0002)

    @Test func loopbackIsRecognised() {
        #expect(Self.loopback6.isLoopback)
        #expect(Self.loopback4.isLoopback)
        #expect(!Self.remote.isLoopback)
        #expect(!ConnectionTable.Peer(high: 0x2001_0db8_0000_0000, low: 1).isLoopback)
        let bytes: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8)
            = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1)
        #expect(ConnectionTable.Peer(bytes).isLoopback)
    }

    @Test func perAddressLimitCountsConnectionsNotStreamsAndExemptsLoopback() {
        var t = ConnectionTable(limits: Self.limits)
        t.opened(1, fd: 11, peer: Self.remote, now: 0)
        t.opened(2, fd: 12, peer: Self.remote, now: 0)
        #expect(!t.admits(Self.remote))
        #expect(t.admits(Self.other))
        for i in 0..<10 { t.opened(UInt(100 + i), fd: Int32(100 + i), peer: Self.loopback4, now: 0) }
        #expect(t.admits(Self.loopback4))
        #expect(t.admits(nil))
        // A stream no longer counts; a new connection fits again, and it counts again once
        // its connection carries requests.
        t.becameStream(1)
        #expect(t.admits(Self.remote))
        t.responded(1, now: 1)
        #expect(!t.admits(Self.remote))
        t.closed(1)
        t.closed(2)
        #expect(t.perAddress.isEmpty)
        #expect(t.admits(Self.remote))
        let off = ConnectionTable(limits: .init(headerTimeout: 10, bodyTimeout: 10, idleTimeout: 60, perAddress: 0))
        #expect(off.admits(Self.remote))
    }

    @Test func deadlinesByPhase() {
        var t = ConnectionTable(limits: Self.limits)
        t.opened(1, fd: 11, peer: nil, now: 0)      // first request: headers due at 10
        t.opened(2, fd: 12, peer: nil, now: 0)
        t.headersComplete(2, now: 5)                 // body due at 25
        t.opened(3, fd: 13, peer: nil, now: 0)
        t.headersComplete(3, now: 1)
        t.busy(3)                                    // being answered: no deadline
        t.opened(4, fd: 14, peer: nil, now: 0)
        t.becameStream(4)
        t.opened(5, fd: 15, peer: nil, now: 0)
        t.busy(5)
        t.responded(5, now: 2)                       // reused: next request line due at 62
        t.requestLine(1, now: 9)                     // the first request's deadline stays at 10
        #expect(t.overdue(now: 9.9).isEmpty)
        #expect(t.overdue(now: 10).map(\.fd) == [11])
        #expect(t.overdue(now: 10).isEmpty, "each is closed once")
        #expect(t.overdue(now: 25).map(\.reason) == [.bodyTimeout])
        t.requestLine(5, now: 61)                    // reused: headers due 10 s after the line
        #expect(t.overdue(now: 70).isEmpty)
        #expect(t.overdue(now: 71).map(\.reason) == [.headerTimeout])
        #expect(t.overdue(now: 10_000).isEmpty, "busy and stream connections have no deadline")
        #expect(t.shedPending == 3)
        t.closed(1)
        #expect(t.shedPending == 2)
        // A reused connection that gets no request line is closed at the idle timeout.
        t.opened(6, fd: 16, peer: nil, now: 100)
        t.busy(6)
        t.responded(6, now: 101)
        #expect(t.overdue(now: 161).map(\.reason) == [.idleTimeout])
    }

    @Test func sheddingTakesTheOldestWaitingOrReceivingConnectionOnly() {
        var t = ConnectionTable(limits: Self.limits)
        t.opened(1, fd: 11, peer: nil, now: 0)
        t.classify(1, stream: false)
        t.busy(1)                                    // oldest, but being answered
        t.opened(2, fd: 12, peer: nil, now: 1)
        t.becameStream(2)                            // a stream: never shed
        t.opened(3, fd: 13, peer: nil, now: 2)
        t.classify(3, stream: false)
        t.headersComplete(3, now: 3)                 // receiving its body
        t.opened(4, fd: 14, peer: nil, now: 4)
        t.requestLine(4, now: 4)
        t.classify(4, stream: false)                 // receiving its headers
        t.opened(5, fd: 15, peer: nil, now: 5)
        t.classify(5, stream: false)                 // the new connection
        #expect(t.apiConnections == 4)
        #expect(t.shedOldest(sparing: 5) == 13)
        #expect(t.shedOldest(sparing: 5) == 14)
        #expect(t.shedOldest(sparing: 5) == nil, "the rest are answered, streams, or the new one")
        #expect(t.shedPending == 2)
        #expect(t.apiConnections == 2, "the shed ones no longer count")
        #expect(t.receivingHeaders.map(\.fd) == [15])
    }

    /// Issue 37: a connection whose request line has not been read yet (a reconnect storm waiting
    /// for the server thread) counts against no budget and is never shed for the API's; a stream
    /// opening counts against the streams'. Only the hard bound sheds unread ones.
    @Test func unreadConnectionsAndStreamOpeningsAreNotTheAPIsToShed() {
        var t = ConnectionTable(limits: Self.limits)
        for i in 1...5 { t.opened(UInt(i), fd: Int32(10 + i), peer: nil, now: Double(i)) }
        t.requestLine(2, now: 6)
        t.classify(2, stream: true)                  // GET /v1/stream, headers still coming
        t.requestLine(3, now: 6)
        t.classify(3, stream: false)                 // an API request, headers still coming
        #expect(t.apiConnections == 1)
        #expect(t.shedOldest(sparing: 0) == 13, "only the API connection is the API's to shed")
        #expect(t.shedOldest(sparing: 0) == nil, "unread connections and stream openings are not")
        #expect(t.apiConnections == 0)
        // At the hard bound, the oldest unread or API connection goes; never a stream opening.
        #expect(t.shedOldest(sparing: 5, among: [.unknown, .api]) == 11)
        #expect(t.shedOldest(sparing: 5, among: [.unknown, .api]) == 14)
        #expect(t.shedOldest(sparing: 5, among: [.unknown, .api]) == nil)
        // A kept-alive connection is the API's; closing it releases its count.
        t.classify(5, stream: false)
        t.busy(5)
        t.responded(5, now: 7)
        #expect(t.apiConnections == 1)
        t.closed(5)
        #expect(t.apiConnections == 0)
        // Headers that turn a stream path into an API request move it to the API's budget.
        t.opened(6, fd: 16, peer: nil, now: 8)
        t.classify(6, stream: true)
        t.classify(6, stream: false)
        #expect(t.apiConnections == 1)
        t.becameStream(6)
        #expect(t.apiConnections == 0)
    }
}
