import FoundationEssentials
import Glibc
import HeraldCore

/// The daemon's log handler: one line per event in the configured format, with a level and
/// format that a reload (SIGHUP) can change while the daemon runs.
public final class DaemonLogHandler: LogHandler, Sendable {
    private let settings: Locked<(level: Logger.Level, format: LogFormat)>
    private let sink: (any LogHandler)?
    private let lock = Locked(())

    /// - Parameter sink: where records go instead of standard error (tests).
    public init(level: Logger.Level, format: LogFormat, sink: (any LogHandler)? = nil) {
        settings = Locked((level, format))
        self.sink = sink
    }

    public func update(level: Logger.Level, format: LogFormat) {
        settings.withLock { $0 = (level, format) }
    }

    public var level: Logger.Level { settings.withLock { $0.level } }

    public func emit(_ record: LogRecord) {
        let (level, format) = settings.withLock { $0 }
        guard record.level >= level else { return }
        if let sink { sink.emit(record); return }
        let line = Array(format.render(record).utf8)
        lock.withLock { _ in FileDescriptorOutput.write(line, to: STDERR_FILENO) }
    }
}
