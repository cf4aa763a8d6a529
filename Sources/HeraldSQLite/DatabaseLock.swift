import FoundationEssentials
import HeraldCore
#if canImport(Glibc)
import Glibc
#endif

/// An exclusive lock on `<database>.daemon.lock`: one daemon per database file, since a daemon
/// settles the claims it finds unfinished at start as its own crashed predecessor's.
final class DatabaseLock: Sendable {
    private let fd: Int32
    let path: String

    init(database: String) throws(StoreError) {
        path = database + ".daemon.lock"
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StoreError("cannot open the lock file \(path): \(String(cString: strerror(errno)))") }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            var buffer = [UInt8](repeating: 0, count: 32)
            let n = pread(fd, &buffer, 31, 0)
            close(fd)
            let holder = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self).trimmingWhitespace() : "?"
            throw StoreError("another herald serve (pid \(holder)) is using \(database); stop it first (lock \(path))")
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, pid, pid.count, 0)
        self.fd = fd
    }

    func release() {
        flock(fd, LOCK_UN)
        close(fd)
    }
}
