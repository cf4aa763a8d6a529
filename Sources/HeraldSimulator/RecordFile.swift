import HeraldAPNs
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// A JSON Lines record file shared by the simulators' recorders, writable from any thread.
///
/// Each ``write(_:)`` puts all its bytes into the file under one lock, so lines written by
/// several connections never interleave.
final class RecordFile: Sendable {
    private let fd: Locked<Int32>

    /// Opens `path`, creating it; `truncate` empties an existing file, otherwise records are appended.
    /// - Throws: naming the file, the reason, and what to check.
    init(path: String, truncate: Bool) throws(SimulatorSetupError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0o644)
        guard fd >= 0 else {
            throw SimulatorSetupError("cannot open the record file \"\(path)\": \(String(cString: strerror(errno))); check the folder exists and is writable")
        }
        self.fd = Locked(fd)
    }

    /// Writes every byte (retrying short writes); dropped once the file is closed or on a write error.
    func write(_ bytes: [UInt8]) {
        fd.withLock { fd in
            guard fd >= 0 else { return }
            bytes.withUnsafeBytes { b in
                var offset = 0
                while offset < b.count {
                    let n = Glibc.write(fd, b.baseAddress! + offset, b.count - offset)
                    if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { break }
                }
            }
        }
    }

    /// Closes the file; later writes are dropped.
    func close() {
        fd.withLock { fd in
            if fd >= 0 { Glibc.close(fd) }
            fd = -1
        }
    }

    deinit { close() }
}
