import Foundation
import HeraldCore
import HeraldTestKit
import Testing

/// What the CLI prints from stored or given strings has its control characters escaped: a CR,
/// LF or ESC in a user id can neither forge a line nor drive the terminal, and JSON output stays
/// the same JSON.
@Suite(.serialized) struct CLIEscapingTests {
    static let user = "eve\r\nforged line\u{1B}[2J\u{7}"
    static let escaped = #"eve\r\nforged line\u001b[2J\u0007"#

    /// Whether `text` holds a raw CR, ESC or BEL.
    func hasRawControls(_ text: String) -> Bool { text.utf8.contains { $0 == 0x0D || $0 == 0x1B || $0 == 0x07 } }

    @Test func devicesListSendAndErrorsEscapeControlCharacters() async throws {
        let f = try CLIFixture()
        defer { f.dir.remove() }
        let add = try await f.run(["devices", "add", "--app", "com.example.app", "--user", Self.user, "--token", f.token(1)])
        #expect(add.status == 0, "\(add.stderr)")
        #expect(add.stdout.contains("for user \(Self.escaped) ") && !hasRawControls(add.stdout), "\(add.stdout)")

        let list = try await f.run(["devices", "list"])
        #expect(list.status == 0, "\(list.stderr)")
        #expect(!hasRawControls(list.stdout), "\(list.stdout)")
        // The header and one row: the LF in the user id did not start a line of its own.
        #expect(list.stdout.utf8.filter { $0 == 0x0A }.count == 2, "\(list.stdout)")
        let row = try #require(list.stdout.split(separator: "\n").last.map(String.init))
        #expect(row.hasPrefix("com.example.app  \(Self.escaped)  \(f.token(1))"), "\(row)")

        // JSON output: still valid JSON, and it reads back to the very user id.
        let json = try await f.run(["devices", "list", "--json"])
        #expect(!hasRawControls(json.stdout) && json.lines.count == 1, "\(json.stdout)")
        #expect(try JSONValue.parse(json.lines[0])["user"]?.stringValue == Self.user)

        let send = try await f.run(["send", "--app", "com.example.app", "--user", Self.user, "--title", "Hi", "--dry-run"])
        #expect(send.status == 0, "\(send.stderr)")
        #expect(send.stdout.contains("user=\(Self.escaped) ") && !hasRawControls(send.stdout), "\(send.stdout)")

        // An error quoting what was given.
        let unknown = try await f.run(["devices\u{1B}[31m"])
        #expect(unknown.status == 2 && unknown.stderr.contains(#"devices\u001b[31m"#) && !hasRawControls(unknown.stderr), "\(unknown.stderr)")
    }

    @Test func theEscapesAreTheLogsAndJSONs() {
        #expect(TerminalText.escaped("plain ünïcode \\ text") == "plain ünïcode \\ text")
        #expect(TerminalText.escaped("a\r\nb\tc\u{0}\u{1B}\u{7F}\u{85}\u{202E}") == #"a\r\nb\tc\u0000\u001b\u007f\u0085\u202e"#)
        let line = #"{"user":"\#(TerminalText.escaped("x\u{85}\u{2028}y"))"}"#
        #expect((try? JSONValue.parse(line))?["user"]?.stringValue == "x\u{85}\u{2028}y")
    }
}
