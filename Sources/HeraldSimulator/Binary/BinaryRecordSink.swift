import Foundation
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// Appends one JSON object per line to a file (`--record out.jsonl`), from any thread.
///
/// The file is created or truncated when the sink opens. Each line is written with a single
/// `write(2)`, so lines from several connections never interleave.
public final class BinaryRecordSink: Sendable {
    private let fd: Locked<Int32>
    public let path: String

    /// Opens (creating or truncating) `path`.
    public init(path: String) throws(BinarySimulatorError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw BinarySimulatorError("cannot open record file \"\(path)\": \(String(cString: strerror(errno)))")
        }
        self.fd = Locked(fd)
        self.path = path
    }

    /// Writes one object as a line.
    func write(_ body: (inout ObjectWriter) -> Void) {
        var writer = JSONWriter()
        writer.object(body)
        var bytes = writer.bytes
        bytes.append(UInt8(ascii: "\n"))
        fd.withLock { fd in
            guard fd >= 0 else { return }
            _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        }
    }

    /// Closes the file; later writes are dropped.
    public func close() {
        fd.withLock { fd in
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }
    }

    deinit { close() }
}

extension ObjectWriter {
    mutating func client(_ identity: APNsBinaryClientIdentity?) {
        guard let identity else { return }
        object("client") { o in
            o.string("subject", identity.subject)
            o.string("uid", identity.uid)
            o.stringArray("topics", identity.topics)
        }
    }
}
