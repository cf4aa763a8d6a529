import HeraldAPNs
import HeraldCore

/// Appends one JSON object per line to a file (`--record out.jsonl`), from any thread.
///
/// The file is created or truncated when the sink opens. Each line is written whole under one
/// lock (``RecordFile``), so lines from several connections never interleave.
public final class BinaryRecordSink: Sendable {
    private let file: RecordFile
    public let path: String

    /// Opens (creating or truncating) `path`.
    public init(path: String) throws(BinarySimulatorError) {
        do {
            file = try RecordFile(path: path, truncate: true)
        } catch {
            throw BinarySimulatorError(error)
        }
        self.path = path
    }

    /// Writes one object as a line.
    func write(_ body: (inout ObjectWriter) -> Void) {
        var writer = JSONWriter()
        writer.object(body)
        var bytes = writer.bytes
        bytes.append(UInt8(ascii: "\n"))
        file.write(bytes)
    }

    /// Closes the file; later writes are dropped.
    public func close() { file.close() }
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
