import APNsBinaryProtocol
import FoundationEssentials
import Glibc
import HeraldAPNs
import HeraldCore

/// Reads the token files the binary simulators take on the command line.
///
/// One entry per line; blank lines and lines starting with `#` are skipped; tokens are hex
/// (upper or lower case). Errors name the file and line.
public enum BinaryTokenFile {
    /// `<hex token>` per line (for `--invalid-tokens`, `--uninstalled-tokens`): lower-case hex.
    public static func tokens(path: String) throws(BinarySimulatorError) -> [String] {
        try lines(path).map { (number, fields) throws(BinarySimulatorError) in
            guard fields.count == 1 else {
                throw BinarySimulatorError("\(path):\(number): expected one hex token, found \(fields.count) fields")
            }
            return try token(fields[0], path: path, line: number)
        }
    }

    /// `<hex token> [unix-time]` per line (for `--dead-tokens`); a missing time means `now`.
    public static func deadTokens(path: String, now: Date = Date()) throws(BinarySimulatorError) -> [FeedbackSimulator.Entry] {
        try lines(path).map { (number, fields) throws(BinarySimulatorError) in
            guard fields.count == 1 || fields.count == 2 else {
                throw BinarySimulatorError("\(path):\(number): expected \"<hex token> [unix-time]\", found \(fields.count) fields")
            }
            let hex = try token(fields[0], path: path, line: number)
            var time = UInt32(clamping: Int(now.timeIntervalSince1970))
            if fields.count == 2 {
                guard let t = UInt32(fields[1]) else {
                    throw BinarySimulatorError("\(path):\(number): time \"\(fields[1])\" is not UNIX seconds (0–4294967295)")
                }
                time = t
            }
            return FeedbackSimulator.Entry(token: BinaryHex.decode(hex)!, time: time)
        }
    }

    /// `HEX=STATUS` (for `--fail-token`).
    public static func fault(_ text: String) throws(BinarySimulatorError) -> (token: String, status: APNsBinaryStatus) {
        let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2, let bytes = BinaryHex.decode(parts[0]), !bytes.isEmpty else {
            throw BinarySimulatorError("expected HEX=STATUS (a hex token, then a status 0–255), found \"\(text)\"")
        }
        guard let status = UInt8(parts[1]) else {
            throw BinarySimulatorError("status \"\(parts[1])\" is not a number from 0 to 255")
        }
        return (BinaryHex.encode(bytes), APNsBinaryStatus(rawValue: status))
    }

    private static func token(_ text: String, path: String, line: Int) throws(BinarySimulatorError) -> String {
        guard let bytes = BinaryHex.decode(text), !bytes.isEmpty else {
            throw BinarySimulatorError("\(path):\(line): \"\(text.prefix(16))\" is not a hex token")
        }
        return BinaryHex.encode(bytes)
    }

    private static func lines(_ path: String) throws(BinarySimulatorError) -> [(Int, [String])] {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw BinarySimulatorError("cannot read \"\(path)\": \(SystemError.describe(error))")
        }
        var out: [(Int, [String])] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            out.append((index + 1, line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)))
        }
        return out
    }
}
