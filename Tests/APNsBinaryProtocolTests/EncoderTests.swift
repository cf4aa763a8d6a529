import APNsBinaryProtocol
import HeraldTestKit
import Testing

/// The encoder against the layout written out independently from Apple's tables (``BinaryWire``),
/// byte for byte, and against the parser the simulator uses.
@Suite("Binary frame encoder and codecs")
struct EncoderTests {
    let token = BinaryWire.token(0x5a)
    let payload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)

    private func encode(_ format: APNsBinaryFormat, identifier: UInt32 = 0x0102_0304, expiry: UInt32 = 0x6000_0001,
                        priority: UInt8 = 5) -> [UInt8] {
        var out: [UInt8] = []
        APNsBinaryFrameEncoder.append(to: &out, format: format, token: token, payload: payload,
                                      identifier: identifier, expiry: expiry, priority: priority)
        #expect(out.count == APNsBinaryFrameEncoder.length(format: format, tokenCount: token.count, payloadCount: payload.count))
        return out
    }

    @Test func simpleIsCommandZeroByteForByte() {
        #expect(encode(.simple) == BinaryWire.simple(token: token, payload: payload))
    }

    @Test func enhancedIsCommandOneByteForByte() {
        #expect(encode(.enhanced) == BinaryWire.enhanced(identifier: 0x0102_0304, expiry: 0x6000_0001, token: token, payload: payload))
    }

    @Test func frameIsCommandTwoWithFiveItemsByteForByte() {
        #expect(encode(.frame) == BinaryWire.frame(token: token, payload: payload, identifier: 0x0102_0304,
                                                   expiry: 0x6000_0001, priority: 5))
    }

    @Test func everyFormatParsesBackThroughTheGatewayParser() {
        for format in APNsBinaryFormat.allCases {
            var parser = BinaryFrameParser()
            parser.append(encode(format, identifier: 77, expiry: 9, priority: 10) + encode(format, identifier: 78, expiry: 9, priority: 10))
            let first = parser.next()
            let second = parser.next()
            #expect(parser.next() == nil)
            #expect(first?.command == format.command && first?.malformed == nil)
            #expect(first?.token == token && first?.payload == payload)
            #expect(first?.identifier == (format == .simple ? nil : 77))
            #expect(second?.identifier == (format == .simple ? nil : 78))
            #expect(first?.priority == (format == .frame ? 10 : nil))
        }
    }

    @Test func errorResponseDecodes() {
        let wire: [UInt8] = [8, 8, 0, 0, 1, 0x2c]
        let response = APNsBinaryErrorResponse(bytes: wire)
        #expect(response?.status == .invalidToken && response?.identifier == 300)
        #expect(response?.bytes == wire)
        #expect(BinaryWire.decodeError(wire) == BinaryWire.ErrorResponse(command: 8, status: 8, identifier: 300))
        #expect(APNsBinaryErrorResponse(bytes: [7, 8, 0, 0, 1, 0x2c]) == nil)
        #expect(APNsBinaryErrorResponse(bytes: [8, 8, 0, 0, 1]) == nil)
    }

    @Test func feedbackTuplesRoundTripAcrossSplitReads() {
        let tuples = [APNsFeedbackTuple(token: BinaryWire.token(1), time: 1_700_000_000),
                      APNsFeedbackTuple(token: BinaryWire.token(2), time: 1_700_000_100)]
        let bytes = tuples.flatMap(\.bytes)
        #expect(BinaryWire.decodeFeedback(bytes)?.map(\.time) == [1_700_000_000, 1_700_000_100])
        var parser = APNsFeedbackParser()
        var read: [APNsFeedbackTuple] = []
        for i in stride(from: 0, to: bytes.count, by: 5) { read += parser.append(bytes[i..<min(i + 5, bytes.count)]) }
        #expect(read == tuples)
        #expect(parser.bufferedCount == 0)
        #expect(parser.append(bytes.prefix(10)).isEmpty && parser.bufferedCount == 10)
    }
}
