import FoundationEssentials
import HeraldCore

/// The gateway's rate limits: one token bucket per `app_id` for all sources together
/// (`matrix.maxRequestsPerSecond`), and one per source and `app_id`
/// (`matrix.maxRequestsPerSecondPerSource`). Every `app_id` that is not configured counts as one,
/// ``AppClass/unknown``, so strangers and typos use their own buckets and never a real app's.
///
/// Memory is bounded: the per-app table has one entry per configured `app_id` plus one, and the
/// per-source table keeps at most ``trackedSources`` entries, evicting the least recently used
/// (an evicted source starts again with a full bucket, as a new one does).
final class MatrixRateLimiter: Sendable {
    /// What a bucket is kept for: a configured `app_id`, or any other.
    enum AppClass: Hashable, Sendable {
        case app(String)
        case unknown

        /// The metrics and log label (`unknown` for every stranger, so the label set stays bounded).
        var label: String {
            switch self {
            case .app(let id): return id
            case .unknown: return "unknown"
            }
        }
    }

    /// Which limit refused a request, and the seconds until its bucket has a token again.
    enum Refusal: Equatable, Sendable {
        case perSource(wait: TimeInterval)
        case perApp(wait: TimeInterval)

        var wait: TimeInterval {
            switch self {
            case .perSource(let w), .perApp(let w): return w
            }
        }

        /// The `reason` label of `herald_matrix_refused_total`.
        var reason: String {
            switch self {
            case .perSource: return "rate_per_source"
            case .perApp: return "rate_per_app"
            }
        }
    }

    /// Entries of the per-source table.
    static let trackedSources = 8192

    private struct SourceKey: Hashable {
        var source: IPAddress
        var app: AppClass
    }

    private struct State {
        var perSource: LRUTable<SourceKey, TokenBucket>
        var perApp: [AppClass: TokenBucket] = [:]
    }

    private let state: Locked<State>

    init(trackedSources: Int = MatrixRateLimiter.trackedSources) {
        state = Locked(State(perSource: LRUTable(capacity: trackedSources)))
    }

    /// Takes a token from each bucket the request needs (its source's for each of its app
    /// classes, then the class's own); `nil` when admitted.
    /// - Parameter source: the peer (keyed by ``IPAddress/clientPrefix``); `nil` counts as one source.
    /// - Parameter configured: the `app_id`s of `matrix.apps`, to bound the per-app table after reloads.
    func admit(source: IPAddress?, apps: Set<AppClass>, perSource: Int, perApp: Int, configured: Set<String>, now: Date) -> Refusal? {
        let prefix = source?.clientPrefix ?? IPAddress(bytes: [UInt8](repeating: 0, count: 16))
        return state.withLock { s in
            for app in apps.sorted(by: { $0.label < $1.label }) {
                let wait = s.perSource.update(SourceKey(source: prefix, app: app), make: { TokenBucket() }) { bucket in
                    bucket.take(rate: perSource, now: now)
                }
                if let wait { return .perSource(wait: wait) }
                if case .app(let id) = app, !configured.contains(id) { continue }
                if s.perApp.count > configured.count + 1 {
                    s.perApp = s.perApp.filter { key, _ in if case .app(let id) = key { return configured.contains(id) } else { return true } }
                }
                if let wait = s.perApp[app, default: TokenBucket()].take(rate: perApp, now: now) { return .perApp(wait: wait) }
            }
            return nil
        }
    }

    /// Sources in the per-source table (for tests).
    var trackedCount: Int { state.withLock { $0.perSource.count } }
}

/// A token bucket holding one second of requests; a new one is full.
struct TokenBucket: Sendable {
    private var tokens: Double = 0
    private var at: Date?

    init() {}

    /// Takes a token; `nil` when one was there, else the seconds until one will be.
    mutating func take(rate: Int, now: Date) -> TimeInterval? {
        let capacity = Double(rate)
        let elapsed = at.map { max(0, now.timeIntervalSince($0)) } ?? .infinity
        tokens = min(capacity, tokens + elapsed * capacity)
        at = now
        if tokens >= 1 { tokens -= 1; return nil }
        return (1 - tokens) / capacity
    }
}

/// A map of at most `capacity` entries that evicts the least recently used one to make room.
/// O(1) per operation (a dictionary into a doubly linked list kept in arrays).
struct LRUTable<Key: Hashable, Value> {
    let capacity: Int
    private var index: [Key: Int] = [:]
    private var keys: [Key?] = []
    private var values: [Value?] = []
    private var previous: [Int] = []
    private var next: [Int] = []
    /// Most recently used, least recently used (-1 when empty).
    private var head = -1
    private var tail = -1

    init(capacity: Int) {
        precondition(capacity > 0, "an LRU table holds at least one entry")
        self.capacity = capacity
    }

    var count: Int { index.count }

    /// Whether `key` is in the table (without marking it used).
    func contains(_ key: Key) -> Bool { index[key] != nil }

    /// Runs `body` on the value of `key` (made by `make` when absent, evicting the least recently
    /// used entry when full) and marks it most recently used.
    mutating func update<R>(_ key: Key, make: () -> Value, _ body: (inout Value) -> R) -> R {
        let slot: Int
        if let found = index[key] {
            slot = found
            unlink(slot)
        } else if index.count < capacity {
            slot = keys.count
            keys.append(key)
            values.append(make())
            previous.append(-1)
            next.append(-1)
            index[key] = slot
        } else {
            slot = tail
            unlink(slot)
            index.removeValue(forKey: keys[slot]!)
            keys[slot] = key
            values[slot] = make()
            index[key] = slot
        }
        pushFront(slot)
        return body(&values[slot]!)
    }

    private mutating func unlink(_ slot: Int) {
        let p = previous[slot], n = next[slot]
        if p >= 0 { next[p] = n } else { head = n }
        if n >= 0 { previous[n] = p } else { tail = p }
        previous[slot] = -1
        next[slot] = -1
    }

    private mutating func pushFront(_ slot: Int) {
        next[slot] = head
        previous[slot] = -1
        if head >= 0 { previous[head] = slot }
        head = slot
        if tail < 0 { tail = slot }
    }
}
