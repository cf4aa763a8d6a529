import FoundationEssentials
import Glibc

/// A storage driver's own keys of the `storage` section (SQLite's `path`, PostgreSQL's `url`), read by
/// the driver's module, as transport plugins read theirs.
///
/// A driver names it as its ``StorageDriver/Section``; ``StorageDrivers/sections(in:)`` registers it (or, in tests, ``TransportRegistry/register(storage:)``). The loader reads `storage.driver`,
/// hands the `storage` node to the section registered under that name, and reports the keys it does not
/// declare in ``keys`` with their JSON paths (an error when another registered driver reads the key).
public protocol StorageSection: Sendable {
    /// The `storage.driver` value that selects this driver.
    static var driver: String { get }
    /// The keys it reads besides `driver`, in documentation order (named in unknown-key messages).
    static var keys: [String] { get }

    /// Reads the driver's keys from `node` (the `storage` object, possibly empty), reporting every
    /// problem on it with its JSON path; `nil` when unusable.
    init?(node: JSONNode)

    /// Whether every commit reaches stable storage before it returns (transports that keep a
    /// ledger of their own match it; see ``TransportContext``).
    var durableWrites: Bool { get }
}

/// `storage`: which driver keeps devices and the queue, and its own keys (see ``StorageSection``).
public struct StorageConfiguration: Sendable, Equatable {
    /// The driver used when `storage.driver` is absent.
    public static let defaultDriver = "sqlite"

    /// `storage.driver`. Default ``defaultDriver``.
    public var driver: String
    /// What the driver read at load time; `nil` when the registry had no ``StorageSection`` for
    /// the driver (registries built for tests), in which case ``section(_:)`` reads it on first use.
    public var section: (any StorageSection)?
    /// The `storage` object as written (after `${NAME}` substitution).
    public var raw: JSONValue
    /// The folder the driver's relative paths resolve against.
    public var baseDirectory: String?

    /// A configuration built in code from a driver's section.
    public init<S: StorageSection>(_ section: S, raw: JSONValue = .object([:]), baseDirectory: String? = nil) {
        driver = S.driver
        self.section = section
        self.raw = raw
        self.baseDirectory = baseDirectory
    }

    init(driver: String, section: (any StorageSection)?, raw: JSONValue, baseDirectory: String?) {
        self.driver = driver
        self.section = section
        self.raw = raw
        self.baseDirectory = baseDirectory
    }

    /// Whether the driver's commits are durable (`true` until its section is read).
    public var durableWrites: Bool { section?.durableWrites ?? true }

    /// The driver's section `S`.
    /// - Throws: ``ConfigurationError`` when ``driver`` is not `S`'s, or (when read now) the section's problems.
    public func section<S: StorageSection>(_ type: S.Type) throws(ConfigurationError) -> S {
        guard driver == S.driver else {
            throw ConfigurationError(source: "config", errors: [JSONIssue(path: "storage.driver", message: "is \"\(driver)\", not \"\(S.driver)\"")], warnings: [])
        }
        if let section = section as? S { return section }
        let context = JSONReadContext(baseDirectory: baseDirectory, unknownKeys: .warn)
        let read = S(node: JSONNode(root: raw, context: context, path: "storage"))
        guard context.errors.isEmpty, let read else {
            throw ConfigurationError(source: "config", errors: context.errors, warnings: context.warnings)
        }
        return read
    }

    public static func == (a: StorageConfiguration, b: StorageConfiguration) -> Bool {
        a.driver == b.driver && a.raw == b.raw && a.baseDirectory == b.baseDirectory
    }
}

extension StorageConfiguration {
    /// Reads `storage.driver` and hands the node to the registered driver's section; reports the keys
    /// that driver does not read. With no section registered at all, keeps the node for ``section(_:)``.
    static func read(_ node: JSONNode?, root: JSONNode, readers: [TransportRegistry.StorageReader]) -> StorageConfiguration {
        let node = node ?? JSONNode(root: .object([:]), context: root.context, path: "storage")
        guard case .object(let members) = node.value else {
            node.error("expected an object such as {\"driver\": \"\(defaultDriver)\"}, found \(node.value.typeDescription)")
            return StorageConfiguration(driver: defaultDriver, section: nil, raw: .object([:]), baseDirectory: root.context.baseDirectory)
        }
        let driver = node.string("driver") ?? defaultDriver
        var result = StorageConfiguration(driver: driver, section: nil, raw: node.value, baseDirectory: root.context.baseDirectory)
        guard !readers.isEmpty else {
            node.allowKeys(Array(members.keys))
            return result
        }
        guard let reader = readers.first(where: { $0.driver == driver }) else {
            node.error(at: "driver", "unknown value \"\(driver)\"; expected one of: \(readers.map(\.driver).joined(separator: ", "))")
            node.allowKeys(Array(members.keys))
            return result
        }
        result.section = reader.read(node)
        for key in members.keys.sorted() where key != "driver" && !reader.keys.contains(key) {
            let reads = "\"\(driver)\" reads \(reader.keys.joined(separator: ", "))"
            if let other = readers.first(where: { $0.keys.contains(key) }) {
                node.error(at: key, "only for \"driver\": \"\(other.driver)\"; \(reads)")
            } else {
                var message = "unknown key, ignored"
                if let suggestion = Spelling.closest(to: key, in: Set(reader.keys)) { message += "; did you mean \"\(suggestion)\"?" }
                node.warning(at: key, "\(message) (\(reads))")
            }
        }
        node.allowKeys(Array(members.keys))
        return result
    }
}
