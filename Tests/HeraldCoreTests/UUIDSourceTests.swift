import Foundation
import HeraldCore
import Testing

/// The fast UUID source: versions, uniqueness, time order, and the lower-case text.
struct UUIDSourceTests {
    @Test func randomIDsAreVersion4AndDistinct() {
        let ids = (0..<20_000).map { _ in UUIDSource.random() }
        #expect(Set(ids).count == ids.count)
        for id in ids.prefix(100) {
            #expect(id.uuid.6 >> 4 == 4)
            #expect(id.uuid.8 >> 6 == 0b10)
        }
    }

    @Test func timeOrderedIDsCarryTheMillisecondAndSortByIt() {
        let t = Date(timeIntervalSince1970: 1_767_225_600.5)
        let a = UUIDSource.timeOrdered(at: t), b = UUIDSource.timeOrdered(at: t + 0.002)
        #expect(a.uuid.6 >> 4 == 7)
        #expect(a.uuid.8 >> 6 == 0b10)
        #expect(a.lowercasedString.hasPrefix("019b76da-a9f4"))  // 1767225600500 ms = 0x019b76daa9f4
        #expect(a.lowercasedString < b.lowercasedString)
        #expect(a != UUIDSource.timeOrdered(at: t))
    }

    @Test func lowercasedStringMatchesFoundation() {
        for id in [UUID(), UUIDSource.random(), UUID(uuidString: "00000000-0000-0000-0000-000000000000")!,
                   UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!] {
            #expect(id.lowercasedString == id.uuidString.lowercased())
        }
    }

    @Test func parsesTheCanonicalTextOnly() {
        for id in [UUID(), UUIDSource.random(), UUIDSource.timeOrdered()] {
            #expect(UUID(lowercasedString: id.lowercasedString) == id)
            #expect(UUID(lowercasedString: id.uuidString) == id)
        }
        for text in ["", "0", "00000000-0000-0000-0000-00000000000", "00000000-0000-0000-0000-0000000000000",
                     "00000000000000000000000000000000", "00000000-0000-0000-0000-00000000000g", "0000000-00000-0000-0000-000000000000",
                     "{00000000-0000-0000-0000-000000000000}"] {
            #expect(UUID(lowercasedString: text) == nil, "\(text)")
        }
    }
}
