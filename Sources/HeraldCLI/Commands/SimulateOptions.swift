import FoundationEssentials
import Glibc

/// Option checks the `simulate` commands share.
extension ParsedArguments {
    /// The values of the file options `names`, in that order, once each is given and readable.
    /// - Throws: a usage error naming the first missing option (`--tls-key is required`), else
    ///   the first file that cannot be read (`--tls-cert: cannot read "server.pem"`).
    func readableFiles(_ names: [String], command: String) throws(CLIError) -> [String] {
        var files: [String] = []
        for name in names { files.append(try required(name, command: command)) }
        for (name, file) in zip(names, files) where !FileManager.default.isReadableFile(atPath: file) {
            throw .usage("--\(name): cannot read \"\(file)\"", command: command)
        }
        return files
    }
}
