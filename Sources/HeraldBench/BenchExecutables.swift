import FoundationEssentials
import Glibc

/// The binaries a benchmark starts: `herald` (its daemon and simulators) and `herald-bench`
/// itself (the load clients, which need processes of their own).
enum BenchExecutables {
    /// A binary that is missing, with where it was looked for.
    struct Missing: Error, CustomStringConvertible {
        var description: String
    }

    /// This binary's own path (`/proc/self/exe`).
    static func bench() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return CommandLine.arguments[0] }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `herald`: `$HERALD` when set, else the `herald` beside this binary (one build folder,
    /// `.build/release` or `.build/debug`, holds both products).
    /// - Throws: ``Missing`` naming the path when there is no such executable.
    static func herald(environment: [String: String] = ProcessInfo.processInfo.environment) throws(Missing) -> String {
        let path: String
        if let given = environment["HERALD"], !given.isEmpty {
            path = given.hasPrefix("/") ? given : FileManager.default.currentDirectoryPath + "/" + given
        } else {
            path = URL(fileURLWithPath: bench()).deletingLastPathComponent().appendingPathComponent("herald").path
        }
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw Missing(description: "no herald executable at \(path); build it (swift build -c release --product herald) or set HERALD")
        }
        return path
    }
}
