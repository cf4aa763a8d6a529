import FoundationEssentials

extension HeraldConfiguration {
    /// Checks of the whole document beyond each section's own reader; problems go to `root`'s context.
    ///
    /// - An unknown top-level key is an **error**, not a warning (as an unknown key inside a
    ///   section is): a misspelt `"storge"` would otherwise run Herald on a new, empty database in
    ///   the default place. The known keys are ``coreSections`` and the registered modules'
    ///   sections (`known`).
    /// - Each app id (a key of `apps`) is within ``FieldLimits/appIDBytes``.
    static func checkDocument(_ root: JSONNode, registered: [String]) {
        guard case .object(let members) = root.value else { return }
        let sections = coreSections + registered
        let unknown = members.keys.filter { !sections.contains($0) }.sorted()
        for key in unknown {
            var message = "unknown top-level key"
            if let suggestion = Spelling.closest(to: key, in: sections) { message += "; did you mean \"\(suggestion)\"?" }
            message += " (known: \(sections.joined(separator: ", ")); an unknown section is refused rather than ignored, "
                + "so that a misspelt one does not run Herald on defaults)"
            root.error(at: key, message)
        }
        root.allowKeys(unknown)  // reported here as errors, not again as "unknown key, ignored"
        if case .object(let apps)? = members["apps"] {
            let node = root.path(of: "apps")
            for id in apps.keys.sorted() {
                if let problem = FieldLimits.appProblem(id) { root.context.error(JSONNode.childPath(node, id), "app id \(problem)") }
            }
        }
    }
}

extension APIConfiguration {
    /// Records an error when two keys of `api.keys` share a secret: the request would be
    /// authenticated as whichever came last, with its scopes. Names both key ids, never the secret.
    static func checkDistinctSecrets(_ keys: [Key], at node: JSONNode) {
        var firstWith: [String: String] = [:]
        for key in keys {
            if let earlier = firstWith[key.secret.value] {
                node.error("keys \"\(earlier)\" and \"\(key.id)\" have the same secret; give each key its own "
                           + "(a request would be authenticated as one of them, with its scopes)")
            } else {
                firstWith[key.secret.value] = key.id
            }
        }
    }
}
