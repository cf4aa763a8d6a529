import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// Log lines stay one line and show only what they say, whatever a stranger puts in a value
/// (issue 24, item 11), in both formats.
@Suite struct LogInjectionTests {
    /// The issue's `app_id`: ESC [2J (clear the screen), NUL, CR, then a forged field.
    static let hostile = "x\u{1b}[2J\u{0}\rlevel=critical msg=pwned"

    static func record(_ value: String, message: String = "pushkey not sent") -> LogRecord {
        LogRecord(time: Date(timeIntervalSince1970: 1_700_000_000), level: .info, label: "api", message: message,
                  metadata: ["app_id": value])
    }

    /// Every scalar a line must not carry raw: C0 (but for none), DEL, C1, the line and
    /// paragraph separators, the bidirectional overrides, and U+FFFD.
    static func rawControls(_ line: String) -> [UInt32] {
        line.dropLast().unicodeScalars.map(\.value).filter { v in
            v < 0x20 || (0x7f...0x9f).contains(v) || v == 0x2028 || v == 0x2029 || (0x202a...0x202e).contains(v)
                || (0x2066...0x2069).contains(v) || v == 0xfffd
        }
    }

    @Test func logfmtEscapesEveryControlCharacter() {
        let line = LogFormat.logfmt.render(Self.record(Self.hostile))
        #expect(line == #"time=2023-11-14T22:13:20.000Z level=info label=api msg="pushkey not sent" app_id="x\u001b[2J\u0000\rlevel=critical msg=pwned""# + "\n")
        #expect(Self.rawControls(line).isEmpty)
        #expect(line.split(separator: "\n", omittingEmptySubsequences: false).count == 2)
    }

    @Test func jsonEscapesEveryControlCharacterAndRoundTrips() throws {
        let line = LogFormat.json.render(Self.record(Self.hostile))
        #expect(line == #"{"time":"2023-11-14T22:13:20.000Z","level":"info","label":"api","msg":"pushkey not sent","app_id":"x\u001b[2J\u0000\rlevel=critical msg=pwned"}"# + "\n")
        #expect(Self.rawControls(line).isEmpty)
        let parsed = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String]
        #expect(parsed?["app_id"] == Self.hostile)
        #expect(parsed?["level"] == "info")
    }

    /// DEL, C1 (NEL, CSI), the separators, a bidi override and invalid UTF-8 (which decoding
    /// turns into U+FFFD), in both formats; in JSON they still decode to the same text.
    @Test func delC1SeparatorsBidiAndInvalidUTF8AreEscapedInBothFormats() throws {
        let invalid = String(decoding: [0x61, 0xff, 0xfe, 0x62], as: UTF8.self)
        let value = "a\u{7f}b\u{85}c\u{9b}31md\u{2028}e\u{2029}f\u{202e}g\u{2066}h" + invalid + "\u{7}"
        let logfmt = LogFormat.logfmt.render(Self.record(value))
        #expect(logfmt.hasSuffix(#" app_id="a\u007fb\u0085c\u009b31md\u2028e\u2029f\u202eg\u2066ha\ufffd\ufffdb\u0007""# + "\n"))
        #expect(Self.rawControls(logfmt).isEmpty)
        let json = LogFormat.json.render(Self.record(value))
        #expect(Self.rawControls(json).isEmpty)
        #expect(json.contains(#""app_id":"a\u007fb\u0085c\u009b31md\u2028e\u2029f\u202eg\u2066ha\ufffd\ufffdb\u0007""#))
        let parsed = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String]
        #expect(parsed?["app_id"] == value)
    }

    /// The message and the label go through the same escaping; a value that needs none stays bare.
    @Test func messagesLabelsAndPlainValues() {
        let r = LogRecord(time: Date(timeIntervalSince1970: 0), level: .warning, label: "a\u{1b}b", message: "m\u{0}\n",
                          metadata: ["plain": "café-1", "quote": #"say "hi"\"#, "empty": ""])
        #expect(LogFormat.logfmt.render(r)
                == #"time=1970-01-01T00:00:00.000Z level=warning label="a\u001bb" msg="m\u0000\n" empty="" plain=café-1 quote="say \"hi\"\\""# + "\n")
        #expect(LogFormat.json.render(r)
                == #"{"time":"1970-01-01T00:00:00.000Z","level":"warning","label":"a\u001bb","msg":"m\u0000\n","empty":"","plain":"café-1","quote":"say \"hi\"\\"}"# + "\n")
    }

    /// A metadata key with characters logfmt cannot carry is made safe (keys come from code, but
    /// a line must hold whatever it is given).
    @Test func logfmtKeysAreSafe() {
        let r = LogRecord(time: Date(timeIntervalSince1970: 0), level: .info, label: "l", message: "m", metadata: ["a b=\u{1b}c": "v"])
        #expect(LogFormat.logfmt.render(r).hasSuffix(" a_b__c=v\n"))
    }
}

/// `IPAddress` and `IPNetwork`, which `matrix.allowedSources` and the per-source limits use.
@Suite struct IPAddressTests {
    @Test func parsesAndPrintsBothFamilies() throws {
        #expect(IPAddress("192.0.2.1")?.description == "192.0.2.1")
        #expect(IPAddress("192.0.2.1")?.isIPv4 == true)
        #expect(IPAddress("::ffff:192.0.2.1") == IPAddress("192.0.2.1"))
        #expect(IPAddress("2001:DB8::1")?.description == "2001:db8::1")
        #expect(IPAddress("2001:db8::1")?.isIPv4 == false)
        #expect(IPAddress("192.0.2") == nil && IPAddress("[::1]") == nil && IPAddress("") == nil && IPAddress("1.2.3.4/8") == nil)
    }

    @Test func networksContainWhatTheySay() throws {
        let v4 = try #require(IPNetwork("10.1.2.3/8"))
        #expect(v4.description == "10.0.0.0/8")
        #expect(v4.contains(IPAddress("10.255.0.1")!) && !v4.contains(IPAddress("11.0.0.1")!))
        #expect(v4.contains(IPAddress("::ffff:10.9.9.9")!))
        #expect(!v4.contains(IPAddress("::a01:203")!))  // IPv4-compatible, not IPv4-mapped: another address
        let host = try #require(IPNetwork("192.0.2.7"))
        #expect(host.prefixLength == 32 && host.contains(IPAddress("192.0.2.7")!) && !host.contains(IPAddress("192.0.2.8")!))
        let v6 = try #require(IPNetwork("2001:db8:abcd::/48"))
        #expect(v6.contains(IPAddress("2001:db8:abcd:12::1")!) && !v6.contains(IPAddress("2001:db8:abce::1")!))
        #expect(!v6.contains(IPAddress("10.0.0.1")!))
        let mapped = try #require(IPNetwork("::ffff:10.0.0.0/104"))
        #expect(mapped.contains(IPAddress("10.1.1.1")!) && !mapped.contains(IPAddress("11.1.1.1")!))
        #expect(IPNetwork("0.0.0.0/0")!.contains(IPAddress("203.0.113.9")!) && !IPNetwork("0.0.0.0/0")!.contains(IPAddress("::1")!))
        #expect(IPNetwork("::/0")!.contains(IPAddress("::1")!))
        for bad in ["10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "nowhere", "10.0.0.0/ 8"] {
            #expect(IPNetwork(bad) == nil, "\(bad)")
        }
    }

    @Test func clientPrefixIsTheAddressOrItsSlash64() {
        #expect(IPAddress("2001:db8:1:2:aaaa::1")!.clientPrefix == IPAddress("2001:db8:1:2::")!)
        #expect(IPAddress("2001:db8:1:2:aaaa::1")!.clientPrefix == IPAddress("2001:db8:1:2:ffff::9")!.clientPrefix)
        #expect(IPAddress("192.0.2.1")!.clientPrefix == IPAddress("192.0.2.1")!)
        #expect(IPAddress("192.0.2.1")!.clientPrefix != IPAddress("192.0.2.2")!.clientPrefix)
    }

    /// `matrix.allowedSources`, `maxRequestsPerSecondPerSource` and `maxDevicesPerApp`: read, with
    /// defaults, and errors that name the element.
    @Test func matrixLimitKeys() throws {
        let base = MatrixPayloadTests.baseConfig
        let m = try #require(try parse("{\(base), \"matrix\": {\"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}").matrix)
        #expect(m.allowedSources == nil && m.maxRequestsPerSecondPerSource == 200 && m.maxDevicesPerApp == 100_000)
        #expect(m.allows(nil) && m.allows(IPAddress("203.0.113.1")))
        let set = try #require(try parse("""
            {\(base), "matrix": {"allowedSources": ["192.0.2.0/24", "2001:db8::/32"], "maxRequestsPerSecondPerSource": 50,
                                 "maxDevicesPerApp": 10, "apps": {"x": {"app": "com.example.app"}}}}
            """).matrix)
        #expect(set.allowedSources == [IPNetwork("192.0.2.0/24")!, IPNetwork("2001:db8::/32")!])
        #expect(set.maxRequestsPerSecondPerSource == 50 && set.maxDevicesPerApp == 10)
        #expect(set.allows(IPAddress("192.0.2.200")) && set.allows(IPAddress("2001:db8:5::1")))
        #expect(!set.allows(IPAddress("192.0.3.1")) && !set.allows(IPAddress("::1")) && !set.allows(nil))
        #expect(errors("{\(base), \"matrix\": {\"allowedSources\": [\"10.0.0.0/33\", 7], \"maxDevicesPerApp\": 0, \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}")
                == ["matrix.maxDevicesPerApp: must be between 1 and 100000000, found 0",
                    #"matrix.allowedSources[0]: expected an address or CIDR range such as "192.0.2.10", "10.0.0.0/8" or "2001:db8::/32", found "10.0.0.0/33""#,
                    "matrix.allowedSources[1]: expected a string, found a number"])
        #expect(errors("{\(base), \"matrix\": {\"allowedSources\": [], \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}")
                == ["matrix.allowedSources: must name at least one address or range (leave the key out to accept any source)"])
        #expect(errors("{\(base), \"matrix\": {\"allowedSources\": \"10.0.0.0/8\", \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}")
                == [#"matrix.allowedSources: expected an array of addresses or CIDR ranges such as ["10.0.0.0/8", "2001:db8::/32"], found a string"#])
    }
}
