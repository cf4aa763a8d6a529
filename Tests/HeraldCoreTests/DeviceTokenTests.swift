import HeraldCore
import Testing

@Suite struct DeviceTokenTests {
    let hex = "1f2e3d4c5b6a79801f2e3d4c5b6a79801f2e3d4c5b6a79801f2e3d4c5b6a7980"

    @Test func normalisesNSDataDescription() throws {
        #expect(try DeviceToken.normalize("<1F2E3D4C 5B6A7980 1F2E3D4C 5B6A7980 1F2E3D4C 5B6A7980 1F2E3D4C 5B6A7980>") == hex)
        #expect(try DeviceToken.normalize(hex.uppercased()) == hex)
        #expect(try DeviceToken.normalize("  \(hex)\n") == hex)
    }

    @Test func refusesWhatIsNotAToken() {
        #expect(throws: DeviceToken.Problem.empty) { try DeviceToken.normalize("<>") }
        #expect(throws: DeviceToken.Problem.notHex(character: "g")) { try DeviceToken.normalize("abcg") }
        #expect(throws: DeviceToken.Problem.oddLength(63)) { try DeviceToken.normalize(String(hex.dropLast())) }
        #expect(throws: DeviceToken.Problem.badLength(bytes: 4)) { try DeviceToken.normalize("01020304") }
        #expect(throws: DeviceToken.Problem.badLength(bytes: 257)) { try DeviceToken.normalize(String(repeating: "ab", count: 257)) }
    }

    @Test func acceptsLongerTokensThanToday() throws {
        let long = String(repeating: "ab", count: 100)
        #expect(try DeviceToken.normalize(long) == long)
    }

    @Test func bytesRoundTrip() {
        let bytes = DeviceToken.bytes(ofHex: hex)
        #expect(bytes.count == 32)
        #expect(bytes.first == 0x1f)
        #expect(DeviceToken.hex(bytes) == hex)
    }

    @Test func tokensAreShortenedForLogs() {
        #expect(Redact.token(hex) == "1f2e3d4c…")
        #expect(Redact.token("abc") == "abc")
    }
}
