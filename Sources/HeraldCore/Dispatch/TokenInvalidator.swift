import FoundationEssentials
import Glibc

/// The one place a dead token is retired: from a delivery's answer (410, BadDeviceToken) or
/// from an out-of-band report (``DeadTokenSource``), always with Apple's timestamp rule.
public struct TokenInvalidator: Sendable {
    public let store: any TokenStore
    private let logger: Logger
    private let metrics: MetricsRegistry

    public init(store: any TokenStore, logger: Logger, metrics: MetricsRegistry) {
        self.store = store
        self.logger = logger.labeled("invalidation")
        self.metrics = metrics
    }

    /// Marks `token` of `app` dead as of `since`; a device registered again after `since` stays.
    /// Store failures are logged and returned as `nil` (the delivery's outcome stands).
    @discardableResult
    public func invalidate(app: String, token: String, since: Date, reason: String) async -> InvalidationResult? {
        do {
            let result = try await store.invalidate(app: app, token: token, at: since, reason: reason)
            metrics.counter("herald_token_invalidations_total", help: "Token invalidations reported by APNs, by result.",
                            labels: [("app", app), ("result", result.rawValue)]).increment()
            logger.info("token invalidated", ["token": Redact.token(token), "app": app, "reason": reason,
                                              "result": result.rawValue, "since": since.iso8601])
            return result
        } catch {
            logger.error("could not invalidate token", ["token": Redact.token(token), "app": app,
                                                        "error": String(describing: error)])
            return nil
        }
    }

    /// Applies a transport's out-of-band reports to every app that routes through it (a
    /// feedback tuple names no app). Returns what happened per report and app.
    public func apply(_ reports: [DeadToken], transport: String, configuration: HeraldConfiguration)
        async -> [(report: DeadToken, app: String, result: InvalidationResult?)]
    {
        let apps = configuration.apps.values.filter { $0.routes.contains(transport) }.map(\.id).sorted()
        var results: [(report: DeadToken, app: String, result: InvalidationResult?)] = []
        for report in reports {
            for app in apps {
                results.append((report, app, await invalidate(app: app, token: report.token, since: report.since, reason: report.reason)))
            }
        }
        return results
    }
}
