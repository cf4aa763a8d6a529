import Foundation
import HeraldAPNs
import HeraldCore
import HeraldTestKit

/// One response as `curl -i` printed it.
struct CurlResponse {
    var status: Int
    /// Header names in lower case.
    var headers: [String: String]
    var body: String
    /// `%{time_total}` in seconds.
    var seconds: Double

    var json: JSONValue? { try? JSONValue.parse(body) }
    var reason: String? { json?["reason"]?.stringValue }
}

/// Runs Debian's `curl --http2` (an independent client) against the simulators.
enum Curl {
    static let path = "/usr/bin/curl"
    static let marker = "##CURL-END "

    /// One request: URL plus extra arguments (`-H`, `-d`, `-X`, `--cert`…).
    struct Request {
        var url: String
        var arguments: [String]
        init(_ url: String, _ arguments: [String] = []) {
            self.url = url
            self.arguments = arguments
        }
    }

    /// - Important: `-w` text must not start with `@` (curl reads a file then).
    /// Sends the requests in order in one curl process (`--next`), so they share a connection.
    /// - Returns: the parsed responses and curl's exit status.
    static func run(_ requests: [Request], caFile: String) async throws -> (responses: [CurlResponse], status: Int32, stderr: String) {
        var arguments: [String] = []
        for (i, r) in requests.enumerated() {
            if i > 0 { arguments.append("--next") }
            arguments += ["-s", "-S", "-i", "--http2", "--cacert", caFile, "-w", "\(marker)%{time_total}##\n"]
            arguments += r.arguments
            arguments.append(r.url)
        }
        let result = try await Run.program(path, arguments)
        return (parse(result.stdout), result.status, result.stderr)
    }

    /// One request.
    static func one(_ url: String, _ arguments: [String], caFile: String) async throws -> CurlResponse {
        let r = try await run([Request(url, arguments)], caFile: caFile)
        guard let first = r.responses.first else {
            throw TestSetupError("curl gave no response (exit \(r.status)): \(r.stderr)")
        }
        return first
    }

    static func parse(_ output: String) -> [CurlResponse] {
        var responses: [CurlResponse] = []
        var rest = Substring(output)
        while let end = rest.range(of: marker) {
            let block = rest[..<end.lowerBound]
            let afterMarker = rest[end.upperBound...]
            let timeText = afterMarker.prefix { $0 != "#" }
            rest = afterMarker.drop { $0 != "\n" }.dropFirst()
            guard let split = block.range(of: "\r\n\r\n") else { continue }
            let head = block[..<split.lowerBound].components(separatedBy: "\r\n")
            let status = head.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
            var headers: [String: String] = [:]
            for line in head.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            responses.append(CurlResponse(status: status, headers: headers, body: String(block[split.upperBound...]),
                                          seconds: Double(timeText) ?? 0))
        }
        return responses
    }
}

/// A throwaway file with `bytes` bytes of JSON-ish payload (for `--data-binary @file`).
func payloadFile(_ directory: TemporaryDirectory, bytes: Int) throws -> String {
    let prefix = #"{"aps":{"alert":""#
    let suffix = #""}}"#
    let filler = String(repeating: "x", count: max(0, bytes - prefix.count - suffix.count))
    let path = directory.file("payload-\(bytes).json")
    try Data((prefix + filler + suffix).utf8).write(to: URL(fileURLWithPath: path))
    return path
}

let sampleToken = String(repeating: "ab", count: 32)
let samplePayload = #"{"aps":{"alert":"hello"}}"#
