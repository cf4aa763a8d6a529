import Synchronization

/// A registry of counters, gauges and histograms, rendered in Prometheus' text format.
///
/// Components take the registry from their caller (the daemon exposes it at `/metrics`); a
/// metric handle is looked up once and then updated lock-free (counters, gauges) or under a
/// short lock (histograms).
public final class MetricsRegistry: Sendable {
    private struct Family {
        var help: String
        var type: String
        var series: [String: AnyMetric] = [:]  // rendered label set → metric
    }

    private enum AnyMetric {
        case counter(Counter)
        case gauge(Gauge)
        case histogram(Histogram)
    }

    private let families = Locked<[String: Family]>([:])

    public init() {}

    /// The counter `name` with these labels, created on first use.
    public func counter(_ name: String, help: String, labels: [(String, String)] = []) -> Counter {
        let key = Self.renderLabels(labels)
        return families.withLock { families -> Counter in
            if case .counter(let c)? = families[name]?.series[key] { return c }
            let c = Counter()
            families[name, default: Family(help: help, type: "counter")].series[key] = .counter(c)
            return c
        }
    }

    /// The gauge `name` with these labels, created on first use.
    public func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> Gauge {
        let key = Self.renderLabels(labels)
        return families.withLock { families -> Gauge in
            if case .gauge(let g)? = families[name]?.series[key] { return g }
            let g = Gauge()
            families[name, default: Family(help: help, type: "gauge")].series[key] = .gauge(g)
            return g
        }
    }

    /// The histogram `name` with these labels and upper bucket bounds, created on first use.
    public func histogram(_ name: String, help: String, labels: [(String, String)] = [],
                          buckets: [Double] = Histogram.latencyBuckets) -> Histogram {
        let key = Self.renderLabels(labels)
        return families.withLock { families -> Histogram in
            if case .histogram(let h)? = families[name]?.series[key] { return h }
            let h = Histogram(buckets: buckets)
            families[name, default: Family(help: help, type: "histogram")].series[key] = .histogram(h)
            return h
        }
    }

    /// The current value of a counter or gauge (for tests and summaries); 0 when absent.
    public func value(_ name: String, labels: [(String, String)] = []) -> Double {
        let key = Self.renderLabels(labels)
        return families.withLock { families -> Double in
            switch families[name]?.series[key] {
            case .counter(let c)?: return Double(c.value)
            case .gauge(let g)?: return g.value
            case .histogram(let h)?: return Double(h.snapshot().count)
            case nil: return 0
            }
        }
    }

    /// The sum of a counter over all its label sets.
    public func total(_ name: String) -> Double {
        families.withLock { families -> Double in
            families[name]?.series.values.reduce(0.0) { sum, metric in
                if case .counter(let c) = metric { return sum + Double(c.value) }
                return sum
            } ?? 0
        }
    }

    /// The sum of a counter over the label sets that include every pair of `labels`
    /// (`herald_deliveries_total` of one transport and outcome, whatever the reason).
    public func total(_ name: String, matching labels: [(String, String)]) -> Double {
        // A rendered pair is `k="v"` between `{`/`,` and `,`/`}`; an escaped value cannot fake one.
        let pairs = labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }
        return families.withLock { families -> Double in
            families[name]?.series.reduce(0.0) { sum, entry in
                guard case .counter(let c) = entry.value else { return sum }
                let key = entry.key
                let all = pairs.allSatisfy { p in key.contains("{" + p + ",") || key.contains("{" + p + "}") || key.contains("," + p + ",") || key.contains("," + p + "}") }
                return all ? sum + Double(c.value) : sum
            } ?? 0
        }
    }

    /// Prometheus text exposition format (version 0.0.4).
    public func render() -> String {
        let snapshot = families.withLock { $0 }
        var out = ""
        for name in snapshot.keys.sorted() {
            let family = snapshot[name]!
            out += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.type)\n"
            for labels in family.series.keys.sorted() {
                switch family.series[labels]! {
                case .counter(let c): out += "\(name)\(labels) \(c.value)\n"
                case .gauge(let g): out += "\(name)\(labels) \(Self.format(g.value))\n"
                case .histogram(let h):
                    let s = h.snapshot()
                    var cumulative: UInt64 = 0
                    for (i, bound) in h.buckets.enumerated() {
                        cumulative += s.counts[i]
                        out += "\(name)_bucket\(Self.addLabel(labels, "le", Self.format(bound))) \(cumulative)\n"
                    }
                    out += "\(name)_bucket\(Self.addLabel(labels, "le", "+Inf")) \(s.count)\n"
                    out += "\(name)_sum\(labels) \(Self.format(s.sum))\n"
                    out += "\(name)_count\(labels) \(s.count)\n"
                }
            }
        }
        return out
    }

    static func renderLabels(_ labels: [(String, String)]) -> String {
        guard !labels.isEmpty else { return "" }
        return "{" + labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
    }

    private static func addLabel(_ rendered: String, _ key: String, _ value: String) -> String {
        rendered.isEmpty ? "{\(key)=\"\(value)\"}" : String(rendered.dropLast()) + ",\(key)=\"\(value)\"}"
    }

    private static func escape(_ s: String) -> String {
        s.reduce(into: "") { out, c in
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
    }

    private static func format(_ v: Double) -> String {
        if v.rounded() == v && abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }
}

/// A monotonically increasing count.
public final class Counter: Sendable {
    private let atomic = Atomic<Int64>(0)
    public init() {}
    public func increment(by amount: Int64 = 1) { atomic.add(amount, ordering: .relaxed) }
    public var value: Int64 { atomic.load(ordering: .relaxed) }
}

/// A value that goes up and down.
public final class Gauge: Sendable {
    private let bits = Atomic<UInt64>(0)
    public init() {}
    public func set(_ value: Double) { bits.store(value.bitPattern, ordering: .relaxed) }
    public func add(_ delta: Double) {
        var current = bits.load(ordering: .relaxed)
        while true {
            let next = (Double(bitPattern: current) + delta).bitPattern
            let (exchanged, original) = bits.compareExchange(expected: current, desired: next, ordering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
    public var value: Double { Double(bitPattern: bits.load(ordering: .relaxed)) }
}

/// A distribution of observed values in fixed buckets.
public final class Histogram: Sendable {
    /// Bucket bounds in seconds suited to delivery latency (1 ms … 30 s).
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    public struct Snapshot: Sendable {
        public var counts: [UInt64]
        public var count: UInt64
        public var sum: Double
    }

    public let buckets: [Double]
    private let state: Locked<Snapshot>

    public init(buckets: [Double]) {
        self.buckets = buckets.sorted()
        state = Locked(Snapshot(counts: Array(repeating: 0, count: buckets.count), count: 0, sum: 0))
    }

    public func observe(_ value: Double) {
        let index = buckets.firstIndex { value <= $0 }
        state.withLock { s in
            if let index { s.counts[index] += 1 }
            s.count += 1
            s.sum += value
        }
    }

    public func snapshot() -> Snapshot { state.withLock { $0 } }
}
