import Foundation
import HeraldCore
import HeraldTestKit
import Testing
@testable import HeraldSimulator

/// The README's examples, to the letter (issue 36): the client token is minted for the device
/// the example just added, the Web Push record line shows what the file holds, and the campaign
/// file is written where git ignores it.
@Suite struct READMEExampleTests {
    static var readme: String { get throws { try String(contentsOfFile: PackagePaths.root + "/README.md", encoding: .utf8) } }

    /// The line of the README that starts with `prefix`.
    static func line(_ prefix: String) throws -> String {
        try #require(try readme.components(separatedBy: "\n").first { $0.hasPrefix(prefix) }, "no README line starts with \(prefix)")
    }

    /// The value of `--name` in a command line (quoted values kept whole).
    static func option(_ name: String, in line: String) throws -> String {
        let rest = try #require(line.components(separatedBy: "--\(name) ").dropFirst().first, "no --\(name) in \(line)")
        if rest.hasPrefix("\"") { return String(rest.dropFirst().prefix { $0 != "\"" }) }
        return String(rest.prefix { $0 != " " })
    }

    @Test func theClientTokenIsForTheDeviceJustAdded() throws {
        let add = try Self.line("herald devices add ")
        let token = try DeviceToken.normalize(try Self.option("token", in: add))
        let mint = try Self.line("herald client-token ")
        #expect(try Self.option("device", in: mint) == token, "\(add)\n\(mint)")
        #expect(try Self.option("user", in: mint) == (try Self.option("user", in: add)) && (try Self.option("app", in: mint)) == (try Self.option("app", in: add)))
    }

    @Test func theCampaignFileIsIgnoredByGit() throws {
        let write = try Self.line("seq 1 1000 | xargs printf ")
        let file = try #require(write.components(separatedBy: "> ").dropFirst().first?.split(separator: " ").first.map(String.init))
        let send = try #require(try Self.readme.components(separatedBy: "\n").first { $0.contains("--tokens-file") })
        #expect(try Self.option("tokens-file", in: send) == file)
        let ignored = try String(contentsOfFile: PackagePaths.root + "/.gitignore", encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(file.hasPrefix("/") || ignored.contains { file == $0 || (file.hasPrefix($0) && $0.hasSuffix("/")) }, "\(file) is neither outside the checkout nor ignored: \(ignored)")
    }

    @Test func theWebPushRecordLineShowsTheFilesKeys() throws {
        let line = try Self.line("tail -1 var/webpush-received.jsonl")
        let shown = try #require(line.components(separatedBy: ": {").dropFirst().first.map { "{" + $0 }, "\(line)")
        // What the simulator writes for a message the daemon sent.
        let message = #"{"id":"n","app":"com.example.web","title":"Herald","body":"To a browser","created_at":"2026-01-01T00:00:00.000Z"}"#
        let record = WebPushServiceRules.Received(time: Date(), origin: "https://127.0.0.1:2198", subscription: 0, ttl: 2419200, urgency: "normal",
                                                  topic: nil, vapidSubject: "mailto:ops@example.com", vapidAudience: "https://127.0.0.1:2198",
                                                  vapidKey: "k", vapidExpiresAt: Date(), plaintext: Array(message.utf8))
        let written = try JSONValue.parse(record.jsonLine)
        func keys(_ text: String) -> [String] {
            let regex = try! NSRegularExpression(pattern: #""([a-z_]+)":"#)
            return regex.matches(in: text, range: NSRange(text.startIndex..., in: text)).map { String(text[Range($0.range(at: 1), in: text)!]) }
        }
        let writtenText = String(decoding: record.jsonLine, as: UTF8.self)
        #expect(keys(shown) == keys(writtenText), "README: \(shown)\nfile:   \(writtenText)")
        #expect(shown.contains(#""app":"com.example.web""#) && written["message"]?["app"]?.stringValue == "com.example.web")
    }
}
