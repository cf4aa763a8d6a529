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
