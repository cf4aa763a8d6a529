import Dispatch
import FoundationEssentials
import Glibc

/// Delivers process signals (SIGTERM, SIGINT, SIGHUP) as an async sequence.
///
/// The signals' default actions are disabled while the stream exists; Dispatch watches them
/// and yields each one as it arrives.
final class SignalStream: @unchecked Sendable {
    let stream: AsyncStream<Int32>
    private var sources: [any DispatchSourceSignal] = []

    init(_ signals: [Int32]) {
        var continuation: AsyncStream<Int32>.Continuation!
        stream = AsyncStream { continuation = $0 }
        let c = continuation!
        for s in signals {
            signal(s, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: s, queue: .global())
            source.setEventHandler { c.yield(s) }
            source.resume()
            sources.append(source)
        }
    }

    deinit {
        for s in sources { s.cancel() }
    }
}
