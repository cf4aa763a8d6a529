import HeraldCore

extension GorushGateway {
    /// gorush's `/api/stat/app`: `total_count` and the tasks are the gorush API's since start;
    /// each platform's `push_success` / `push_error` are the final outcomes of its route
    /// (delivered; invalid token, rejected, expired or failed), whoever sent through it, and
    /// `push_error` also counts the tokens of `/api/push` that no route took.
    func statJSON(_ section: GorushConfiguration) -> [UInt8] {
        let configuration = context.configuration()
        let c = counters.withLock { $0 }
        let registry = context.metrics
        func outcomes(_ platform: Platform) -> (success: Int, error: Int) {
            guard let app = configuration.app(section.app),
                  let route = try? FanOut.firstRoute(of: platform, app: app, configuration: configuration) else { return (0, 0) }
            func count(_ state: DeliveryState) -> Int {
                Int(registry.total("herald_deliveries_total", matching: [("transport", route), ("outcome", state.rawValue)]))
            }
            return (count(.delivered), count(.invalidToken) + count(.rejected) + count(.expired) + count(.failed))
        }
        func withRefused(_ counts: (success: Int, error: Int), _ name: String) -> (success: Int, error: Int) {
            (counts.success, counts.error + (c.refusedTokens[name] ?? 0))
        }
        let ios = withRefused(outcomes(.ios), "ios"), android = withRefused(outcomes(.android), "android")
        var w = JSONWriter(capacity: 256)
        w.object { o in
            o.string("version", "herald")
            o.int("busy_workers", 0)
            o.int("success_tasks", c.committed)
            o.int("failure_tasks", c.refused)
            o.int("submitted_tasks", c.committed + c.refused)
            o.int("total_count", c.targets)
            for (name, counts) in [("ios", ios), ("android", android), ("huawei", (success: 0, error: 0))] {
                o.object(name) { p in
                    p.int("push_success", counts.success)
                    p.int("push_error", counts.error)
                }
            }
        }
        return w.bytes
    }
}
