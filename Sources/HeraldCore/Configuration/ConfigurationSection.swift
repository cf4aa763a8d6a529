import FoundationEssentials
import Glibc

/// A top-level section of `config.json` that a module outside the core reads itself (the
/// Matrix gateway's `matrix`, gorush's `gorush`), as transport plugins read theirs.
///
/// Register it in `main` with ``TransportRegistry/register(section:)``; the loader hands it
/// its node, and every key it does not ask for is reported with its JSON path.
public protocol ConfigurationSection: Sendable {
    /// The section's top-level key.
    static var key: String { get }

    /// Reads the section from `node`, reporting every problem on it; `nil` when unusable.
    /// - Parameter apps: the configuration's apps (a section may refer to them).
    init?(node: JSONNode, apps: [String: AppConfiguration])
}

extension HeraldConfiguration {
    /// The section `S`, when the file has it and it was registered.
    public func section<S: ConfigurationSection>(_ type: S.Type) -> S? { sections[S.key] as? S }
}
