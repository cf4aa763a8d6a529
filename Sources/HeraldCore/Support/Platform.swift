#if !os(Linux)
#error("Herald builds on Linux only: it uses Glibc, epoll and /proc directly")
#endif
import Glibc
import FoundationEssentials

// Small POSIX building blocks, so that no Herald module needs the whole of Foundation (its
// library, ICU and internationalisation data cost about 6 MB of every process's memory);
// FoundationEssentials has the rest (Data, Date, URL, FileManager, ProcessInfo).

/// Starts named OS threads for loops that block (event loops, the SQLite writer, accept loops).
public enum OSThread {
    private final class Start: @unchecked Sendable {
        let body: @Sendable () -> Void
        let name: String
        init(_ name: String, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }

    /// Runs `body` on a new detached thread called `name` (the first 15 bytes show in `top -H`).
    /// - Parameter stackSize: bytes of stack; nil for the system default (8 MB of address space).
    public static func start(name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        if let stackSize { pthread_attr_setstacksize(&attributes, max(stackSize, Int(PTHREAD_STACK_MIN))) }
        let start = Unmanaged.passRetained(Start(name, body)).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, &attributes, { argument in
            let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
            nameThisThread(start.name)
            start.body()
            return nil
        }, start)
        if status != 0 {
            Unmanaged<Start>.fromOpaque(start).release()
            fatalError("pthread_create failed: \(String(cString: strerror(status)))")
        }
    }
}

/// Names the calling thread (Glibc's module does not offer `pthread_setname_np`).
private func nameThisThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY)
    guard fd >= 0 else { return }
    FileDescriptorOutput.write(name.utf8.prefix(15), to: fd)
    close(fd)
}

/// A mutex with a condition variable (what `NSCondition` does), for threads that sleep until
/// work arrives. Call ``wait()`` and ``signal()`` with the lock held.
public final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }
    /// Wakes one waiting thread.
    public func signal() { pthread_cond_signal(condition) }
    /// Wakes every waiting thread.
    public func broadcast() { pthread_cond_broadcast(condition) }
    /// Releases the lock until signalled (or spuriously woken), then takes it again.
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// Like ``wait()``, but for at most `seconds`. - Returns: false when the time ran out.
    @discardableResult
    public func wait(seconds: Double) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let whole = Int(max(0, seconds))
        var deadline = timespec(tv_sec: now.tv_sec + whole,
                                tv_nsec: now.tv_nsec + Int((max(0, seconds) - Double(whole)) * 1e9))
        if deadline.tv_nsec >= 1_000_000_000 { deadline.tv_sec += 1; deadline.tv_nsec -= 1_000_000_000 }
        return pthread_cond_timedwait(condition, mutex, &deadline) == 0
    }

    /// Runs `body` with the lock held.
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// Writing to standard output, standard error or any file descriptor, whole buffers at a time.
public enum FileDescriptorOutput {
    /// Writes every byte of `bytes` to `fd`, retrying short writes and EINTR.
    /// - Returns: false when the descriptor failed (closed pipe, full disk).
    @discardableResult
    public static func write(_ bytes: some Collection<UInt8>, to fd: Int32) -> Bool {
        var buffer = Array(bytes)
        return buffer.withUnsafeMutableBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += n
            }
            return true
        }
    }

    /// Writes `text` to standard output.
    public static func standardOutput(_ text: String) { write(Array(text.utf8), to: STDOUT_FILENO) }
    /// Writes `text` to standard error.
    public static func standardError(_ text: String) { write(Array(text.utf8), to: STDERR_FILENO) }
}

extension Double {
    /// The value with `places` digits after the point (what `String(format: "%.2f")` gives),
    /// left-padded with spaces to `width` characters.
    public func fixed(_ places: Int, width: Int = 0) -> String {
        var text: String
        if !isFinite {
            text = "\(self)"
        } else {
            var scale = 1.0
            for _ in 0..<places { scale *= 10 }
            let scaled = (abs(self) * scale).rounded()
            let whole = (scaled / scale).rounded(.towardZero)
            let fraction = scaled - whole * scale
            text = (self < 0 && scaled != 0 ? "-" : "") + String(Int64(whole))
            if places > 0 {
                let digits = String(Int64(fraction))
                text += "." + String(repeating: "0", count: max(0, places - digits.count)) + digits
            }
        }
        return text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
}

extension StringProtocol {
    /// The text without leading and trailing white space and newlines.
    public func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0.isWhitespace }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[first...last])
    }
}

/// Short, readable text for file and system errors ("No such file or directory"), since
/// FoundationEssentials errors print as their raw structure.
public enum SystemError {
    public static func describe(_ error: any Error) -> String {
        if let posix = error as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
        if let cocoa = error as? CocoaError {
            if let posix = cocoa.underlying as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
            return "file error \(cocoa.code.rawValue)"
        }
        return "\(error)"
    }
}
