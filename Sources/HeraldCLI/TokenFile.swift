import FoundationEssentials
import Glibc

/// `--tokens-file`: one token per line (blank lines and `#` comments skipped), read in chunks
/// so a file of any size is sent in bounded memory.
struct TokenFile: Sequence {
    let path: String
    let chunkSize: Int

    /// Opens `path` for reading.
    /// - Throws: a usage error naming the file when it cannot be read.
    init(path: String, chunkSize: Int = 5_000) throws(CLIError) {
        guard access(path, R_OK) == 0 else {
            throw .usage("--tokens-file: cannot read \"\(path)\": \(String(cString: strerror(errno)))", command: "send")
        }
        self.path = path
        self.chunkSize = Swift.max(1, chunkSize)
    }

    /// How many tokens the file holds (one quick pass), for the progress bar.
    func count() -> Int {
        var n = 0
        for chunk in self { n += chunk.count }
        return n
    }

    func makeIterator() -> Iterator { Iterator(path: path, chunkSize: chunkSize) }

    /// Reads 1 MiB at a time and hands out up to `chunkSize` tokens per call.
    final class Iterator: IteratorProtocol {
        private let fd: Int32
        private let chunkSize: Int
        private var buffer = [UInt8](repeating: 0, count: 1 << 20)
        private var pending: [UInt8] = []
        /// Where the unread part of `pending` starts.
        private var start = 0
        private var eof = false

        init(path: String, chunkSize: Int) {
            fd = open(path, O_RDONLY | O_CLOEXEC)
            self.chunkSize = chunkSize
            eof = fd < 0
        }

        deinit { if fd >= 0 { close(fd) } }

        func next() -> [String]? {
            var tokens: [String] = []
            tokens.reserveCapacity(chunkSize)
            while tokens.count < chunkSize {
                if let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                    take(pending[start..<newline], into: &tokens)
                    start = newline + 1
                    continue
                }
                if eof {
                    if start < pending.count { take(pending[start...], into: &tokens) }
                    pending.removeAll()
                    start = 0
                    break
                }
                pending.removeFirst(start)
                start = 0
                let n = read(fd, &buffer, buffer.count)
                if n <= 0 { eof = true } else { pending += buffer[..<n] }
            }
            return tokens.isEmpty ? nil : tokens
        }

        private func take(_ line: ArraySlice<UInt8>, into tokens: inout [String]) {
            let trimmed = String(decoding: line, as: UTF8.self).trimmingWhitespace()
            if trimmed.isEmpty || trimmed.hasPrefix("#") { return }
            tokens.append(trimmed)
        }
    }
}
