import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import HeraldClient
import Testing

/// The socket transport's response reader, without a network: the head, chunked bodies cut at
/// every byte, `Content-Length`, bodies up to the close, and what it refuses.
@Suite struct HTTPResponseReaderTests {
    typealias Output = HTTPResponseReader.Output

    /// What the reader makes of `pieces` fed one after the other, then (when `close`) the end of the connection.
    static func read(_ pieces: [String], close: Bool = false) throws -> [Output] {
        var reader = HTTPResponseReader()
        var out: [Output] = []
        for p in pieces { out += try reader.feed(Array(p.utf8)) }
        if close { out += try reader.finish() }
        return out
    }

    /// The body bytes of `outputs` as text, and whether it ended.
    static func body(_ outputs: [Output]) -> (String, ended: Bool) {
        var data = Data()
        var ended = false
        for o in outputs {
            if case .body(let d) = o { data += d }
            if case .end = o { ended = true }
        }
        return (String(decoding: data, as: UTF8.self), ended)
    }

    static let chunkedHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
    static let chunkedBody = "d\r\nretry: 2000\n\n\r\n15;ext=1\r\nid: 1\ndata: {\"a\":1}\n\n\r\n0\r\nTrailer: x\r\n\r\n"

    @Test func theHeadHasTheStatusAndLowerCasedHeadersWithRepeatsJoined() throws {
        let out = try Self.read([Self.chunkedHead])
        #expect(out == [.head(status: 200, headers: ["content-type": "text/event-stream", "transfer-encoding": "chunked", "x-a": "1, 2"])])
    }

    @Test func aChunkedBodyIsUnchunkedWhateverTheReadsAndEndsAtTheLastChunk() throws {
        let whole = Self.chunkedHead + Self.chunkedBody
        let expected = "retry: 2000\n\nid: 1\ndata: {\"a\":1}\n\n"
        #expect(Self.body(try Self.read([whole])) == (expected, true))
        // Cut at every position: the same body.
        let bytes = Array(whole.utf8)
        for cut in 1..<bytes.count {
            var reader = HTTPResponseReader()
            let out = try reader.feed(bytes[..<cut]) + reader.feed(bytes[cut...])
            #expect(Self.body(out) == (expected, true), "cut at \(cut)")
        }
        // One byte at a time.
        var reader = HTTPResponseReader()
        var out: [Output] = []
        for b in bytes { out += try reader.feed([b]) }
        #expect(Self.body(out) == (expected, true))
        #expect(reader.isDone)
    }

    @Test func aStreamThatIsStillOpenHandsOnEachChunkAsItArrives() throws {
        var reader = HTTPResponseReader()
        _ = try reader.feed(Array(Self.chunkedHead.utf8))
        #expect(try reader.feed(Array("7\r\n: hello".utf8)) == [.body(Data(": hello".utf8))])
        #expect(try reader.feed(Array("\r\n".utf8)) == [])
        #expect(!reader.isDone)
    }

    @Test func contentLengthCutsTheBodyAndZeroOrNoContentEndsAtTheHead() throws {
        #expect(Self.body(try Self.read(["HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nabc", "de", "fgh"])) == ("abcde", true))
        #expect(try Self.read(["HTTP/1.1 204 No Content\r\n\r\n"]) == [.head(status: 204, headers: [:]), .end])
        #expect(try Self.read(["HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"]) == [.head(status: 401, headers: ["content-length": "0"]), .end])
    }

    @Test func aBodyWithoutFramingEndsWithTheConnection() throws {
        let out = try Self.read(["HTTP/1.1 200 OK\r\n\r\npart one, ", "part two"], close: true)
        #expect(Self.body(out) == ("part one, part two", true))
    }

    @Test func interimAnswersAreSkipped() throws {
        let out = try Self.read(["HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])
        #expect(out == [.head(status: 200, headers: ["content-length": "2"]), .body(Data("ok".utf8)), .end])
    }

    @Test func aConnectionThatEndsInsideAFramedBodyOrTheHeadIsLost() throws {
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read([Self.chunkedHead, "5\r\nab"], close: true) }
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read(["HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab"], close: true) }
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read(["HTTP/1.1 200 OK\r\nContent-"], close: true) }
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read([], close: true) }
    }

    @Test func whatIsNotHTTPIsRefusedWithTheReason() throws {
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read(["SSH-2.0-OpenSSH\r\n\r\n"]) }
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read(["HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"]) }
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read([Self.chunkedHead, "zz\r\n"]) }
        #expect(throws: HTTPResponseReader.Malformed.self) { try Self.read([Self.chunkedHead, "2\r\nabXY"]) }
        #expect(throws: HTTPResponseReader.Malformed.self) {
            try Self.read(["HTTP/1.1 200 OK\r\nX: " + String(repeating: "a", count: HTTPResponseReader.maxHeadBytes + 10)])
        }
    }

    @Test func theRequestHasTheTargetAsEncodedTheHostAndTheHeaders() throws {
        let url = try #require(URL(string: "http://127.0.0.1:8080/base/v1/stream?app=com.a&x=a%20b"))
        var request = URLRequest(url: url)
        request.setValue("Bearer t", forHTTPHeaderField: "Authorization")
        request.setValue("7", forHTTPHeaderField: "Last-Event-ID")
        #if os(Linux)
        let text = String(decoding: SocketStreamConnection.requestBytes(request, url: url), as: UTF8.self)
        #expect(text == "GET /base/v1/stream?app=com.a&x=a%20b HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                + "Authorization: Bearer t\r\nLast-Event-Id: 7\r\nConnection: close\r\n\r\n")
        // On Linux a plain-http stream takes the socket transport; https keeps URLSession (TLS).
        #expect(makeStreamConnection(request: request, idleTimeout: 1) is SocketStreamConnection)
        #expect(makeStreamConnection(request: URLRequest(url: URL(string: "https://h/v1/stream")!), idleTimeout: 1) is URLSessionStreamConnection)
        #endif
    }
}
