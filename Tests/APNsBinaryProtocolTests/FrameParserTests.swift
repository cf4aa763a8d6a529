import Testing
import APNsBinaryProtocol
import HeraldTestKit

@Suite("Binary frame parser")
struct BinaryFrameParserTests {
    private func parseAll(_ bytes: [UInt8], chunk: Int? = nil) -> [BinaryParsedFrame] {
        var parser = BinaryFrameParser()
        var frames: [BinaryParsedFrame] = []
        var index = 0
        let step = chunk ?? max(bytes.count, 1)
        while index < bytes.count {
            parser.append(bytes[index..<min(index + step, bytes.count)])
            index += step
            while let f = parser.next() { frames.append(f) }
        }
        return frames
    }

    @Test func simpleCommandZero() throws {
        let token = BinaryWire.token(0xab)
        let frames = parseAll(BinaryWire.simple(token: token))
        let f = try #require(frames.first)
        #expect(frames.count == 1)
        #expect(f.command == 0)
        #expect(f.token == token)
        #expect(f.payload == BinaryWire.alert)
        #expect(f.identifier == nil && f.expiry == nil && f.priority == nil && f.malformed == nil)
    }

    @Test func enhancedCommandOneIsBigEndian() throws {
        let bytes = BinaryWire.enhanced(identifier: 0x0102_0304, expiry: 0x5566_7788, token: BinaryWire.token(1))
        let f = try #require(parseAll(bytes).first)
        #expect(f.command == 1)
        #expect(f.identifier == 0x0102_0304)
        #expect(f.expiry == 0x5566_7788)
        #expect(f.token?.count == 32)
    }

    @Test func frameItemsInAnyOrder() throws {
        let token = BinaryWire.token(7)
        let bytes = BinaryWire.frame([
            BinaryWire.item(5, [5]),
            BinaryWire.item(3, BinaryWire.u32(42)),
            BinaryWire.item(2, BinaryWire.alert),
            BinaryWire.item(4, BinaryWire.u32(1_700_000_000)),
            BinaryWire.item(1, token),
        ])
        let f = try #require(parseAll(bytes).first)
        #expect(f.command == 2)
        #expect(f.token == token)
        #expect(f.payload == BinaryWire.alert)
        #expect(f.identifier == 42)
        #expect(f.expiry == 1_700_000_000)
        #expect(f.priority == 5)
        #expect(f.malformed == nil)
        #expect(f.wireLength == bytes.count)
    }

    @Test func framesSplitAcrossReadsAndManyInOneRead() {
        var stream: [UInt8] = []
        for i in 0..<20 {
            switch i % 3 {
            case 0: stream += BinaryWire.simple(token: BinaryWire.token(UInt8(i)))
            case 1: stream += BinaryWire.enhanced(identifier: UInt32(i), token: BinaryWire.token(UInt8(i)))
            default: stream += BinaryWire.frame(token: BinaryWire.token(UInt8(i)), identifier: UInt32(i), priority: 10)
            }
        }
        let whole = parseAll(stream)
        #expect(whole.count == 20)
        for chunk in [1, 2, 3, 5, 7, 64, 1000] {
            let pieces = parseAll(stream, chunk: chunk)
            #expect(pieces == whole, "chunk size \(chunk)")
        }
        #expect(whole.map(\.command) == (0..<20).map { UInt8([0, 1, 2][$0 % 3]) })
        #expect(whole[19].token == BinaryWire.token(19))
    }

    @Test func incompleteFrameWaits() {
        var parser = BinaryFrameParser()
        let bytes = BinaryWire.frame(token: BinaryWire.token(1), identifier: 9)
        parser.append(bytes.dropLast())
        #expect(parser.next() == nil)
        #expect(parser.bufferedCount == bytes.count - 1)
        parser.append(bytes.suffix(1))
        #expect(parser.next()?.identifier == 9)
        #expect(parser.bufferedCount == 0)
    }

    @Test func unknownCommandIsMalformed() throws {
        let f = try #require(parseAll([9, 0, 0, 0]).first)
        #expect(f.command == 9)
        #expect(f.malformed?.contains("unknown command 9") == true)
    }

    @Test func unknownItemIsMalformedButKeepsTheIdentifier() throws {
        let bytes = BinaryWire.frame([
            BinaryWire.item(1, BinaryWire.token(1)),
            BinaryWire.item(6, [1, 2]),
            BinaryWire.item(2, BinaryWire.alert),
            BinaryWire.item(3, BinaryWire.u32(77)),
        ])
        let f = try #require(parseAll(bytes).first)
        #expect(f.malformed?.contains("unknown item id 6") == true)
        #expect(f.identifier == 77)
    }

    @Test func repeatedItemIsMalformed() throws {
        let bytes = BinaryWire.frame([
            BinaryWire.item(1, BinaryWire.token(1)), BinaryWire.item(1, BinaryWire.token(2)), BinaryWire.item(2, BinaryWire.alert),
        ])
        let f = try #require(parseAll(bytes).first)
        #expect(f.malformed?.contains("item 1 appears more than once") == true)
    }

    @Test func fixedSizeItemsMustHaveTheirSize() throws {
        let cases: [([UInt8], String)] = [
            (BinaryWire.item(3, [1, 2, 3]), "item 3 (notification identifier) must be 4 bytes, found 3"),
            (BinaryWire.item(4, [1, 2, 3, 4, 5]), "item 4 (expiration date) must be 4 bytes, found 5"),
            (BinaryWire.item(5, [10, 10]), "item 5 (priority) must be 1 byte, found 2"),
        ]
        for (item, reason) in cases {
            let bytes = BinaryWire.frame([BinaryWire.item(1, BinaryWire.token(1)), BinaryWire.item(2, BinaryWire.alert), item])
            let f = try #require(parseAll(bytes).first)
            #expect(f.malformed == reason)
        }
    }

    @Test func itemOverrunningTheFrameIsMalformed() throws {
        // Frame length says 10 bytes; the item inside claims 32.
        let bytes: [UInt8] = [2] + BinaryWire.u32(10) + [1] + BinaryWire.u16(32) + [UInt8](repeating: 0, count: 7)
        let f = try #require(parseAll(bytes).first)
        #expect(f.malformed == "item 1 declares 32 bytes but only 7 remain in the frame")
        #expect(f.wireLength == bytes.count)
        // And a truncated item header.
        let short: [UInt8] = [2] + BinaryWire.u32(2) + [1, 0]
        #expect(parseAll(short).first?.malformed?.contains("item header truncated") == true)
    }

    @Test func absurdFrameLengthFailsWithoutBuffering() throws {
        let f = try #require(parseAll([2] + BinaryWire.u32(0xFFFF_FFF0)).first)
        #expect(f.malformed?.contains("frame length 4294967280 exceeds") == true)
    }
}
