import HeraldCore
import Testing

@Suite struct StrictJSONTests {
    @Test func readsEveryKindOfValue() throws {
        let value = try JSONValue.parse(#" {"a":"x\"\u00e9\ud83d\ude00\n","n":17,"f":-1.5e3,"o":{"p":[1,true,null]},"b":false} "#)
        #expect(value["a"] == .string("x\"é😀\n"))
        #expect(value["n"]?.intValue == 17)
        #expect(value["f"]?.doubleValue == -1500)
        #expect(value["o"]?["p"] == [1, true, nil])
        #expect(value["b"] == false)
        #expect(try JSONValue.parse("[]") == [])
        #expect(try JSONValue.parse("\"é\"") == "é")
    }

    @Test(arguments: [
        (#"{"a":1,}"#, "expected a string key"),
        (#"{"a":01}"#, "expected ',' or '}'"),
        (#"{"a":1} x"#, "unexpected data after the JSON value"),
        (#"{"a":"\q"}"#, "invalid escape"),
        ("{\"a\":\"\n\"}", "control character"),
        (#"{"a":1,"a":2}"#, "duplicate key \"a\""),
        (#"["\ud800"]"#, "lone high surrogate"),
        ("[1e999]", "number out of range"),
        ("[tru]", "invalid literal"),
        ("", "unexpected end of input"),
    ])
    func rejectsWhatRFC8259Rejects(text: String, expected: String) {
        #expect(throws: JSONValue.ParseError.self) { try JSONValue.parse(text) }
        do {
            _ = try JSONValue.parse(text)
        } catch {
            #expect(error.message.contains(expected), "\(text): \(error.message)")
        }
    }

    @Test func invalidUTF8IsRejected() {
        #expect(throws: JSONValue.ParseError.self) { try JSONValue.parse([0x22, 0xFF, 0x22]) }
    }

    @Test func nestingIsBounded() throws {
        let deep = String(repeating: "[", count: StrictJSON.maxDepth + 1) + String(repeating: "]", count: StrictJSON.maxDepth + 1)
        #expect(throws: JSONValue.ParseError.self) { try JSONValue.parse(deep) }
        let fine = String(repeating: "[", count: StrictJSON.maxDepth) + String(repeating: "]", count: StrictJSON.maxDepth)
        _ = try JSONValue.parse(fine)
    }

    @Test func aByteOrderMarkIsSkippedAndStrayBytesAreShownInHex() throws {
        #expect(try JSONValue.parse([0xEF, 0xBB, 0xBF] + Array(#"{"a":1}"#.utf8))["a"]?.intValue == 1)
        do {
            _ = try JSONValue.parse([0xFF, 0x7B, 0x7D])
            Issue.record("parsed invalid JSON")
        } catch {
            #expect(error.message == "invalid JSON at line 1, column 1: unexpected byte 0xFF")
        }
    }

    @Test func errorsSayTheLineAndColumn() {
        do {
            _ = try JSONValue.parse("{\n  \"a\": 1,\n  \"b\": tru\n}")
            Issue.record("parsed invalid JSON")
        } catch {
            #expect(error.message == "invalid JSON at line 3, column 8: invalid literal")
        }
    }
}
