import Foundation
import HeraldCore
import HeraldTestKit
import Testing

@Suite struct SupportTests {
    @Test func logfmtQuotesWhatNeedsQuoting() {
        let record = LogRecord(time: Date(timeIntervalSince1970: 0), level: .info, label: "dispatcher",
                               message: "token invalidated", metadata: ["token": "1f2e3d4c…", "reason": "said \"no\""])
        #expect(LogFormat.logfmt.render(record)
                == "time=1970-01-01T00:00:00.000Z level=info label=dispatcher msg=\"token invalidated\" reason=\"said \\\"no\\\"\" token=1f2e3d4c…\n")
        #expect(LogFormat.json.render(record)
                == #"{"time":"1970-01-01T00:00:00.000Z","level":"info","label":"dispatcher","msg":"token invalidated","reason":"said \"no\"","token":"1f2e3d4c…"}"# + "\n")
    }

    @Test func levelsFilterBeforeBuildingTheMessage() {
        let handler = RecordingLogHandler()
        let logger = Logger(label: "t", level: .warning, handler: handler)
        logger.info("hidden")
        logger.error("shown", ["k": "v"])
        #expect(handler.records.map(\.message) == ["shown"])
    }

    @Test func secretsRedactInInterpolation() {
        let s = Secret("hunter2-hunter2")
        #expect("key=\(s)" == "key=<redacted>")
        #expect(String(reflecting: s) == "<redacted>")
    }

    @Test func iso8601() {
        #expect(Date(timeIntervalSince1970: 1_764_416_631.123).iso8601 == "2025-11-29T11:43:51.123Z")
        #expect(Date(timeIntervalSince1970: 951_782_400).iso8601 == "2000-02-29T00:00:00.000Z")
        #expect(Date(millisecondsSince1970: 1_500).millisecondsSince1970 == 1_500)
    }

    @Test func prometheusRendering() {
        let m = MetricsRegistry()
        m.counter("herald_accepted_total", help: "Accepted.").increment(by: 3)
        m.counter("herald_deliveries_total", help: "Deliveries.", labels: [("transport", "apns"), ("outcome", "delivered")]).increment()
        m.gauge("herald_queue_depth", help: "Depth.").set(7)
        let h = m.histogram("herald_latency_seconds", help: "Latency.", buckets: [0.1, 1])
        h.observe(0.05); h.observe(0.5); h.observe(5)
        #expect(m.render() == """
        # HELP herald_accepted_total Accepted.
        # TYPE herald_accepted_total counter
        herald_accepted_total 3
        # HELP herald_deliveries_total Deliveries.
        # TYPE herald_deliveries_total counter
        herald_deliveries_total{transport="apns",outcome="delivered"} 1
        # HELP herald_latency_seconds Latency.
        # TYPE herald_latency_seconds histogram
        herald_latency_seconds_bucket{le="0.1"} 1
        herald_latency_seconds_bucket{le="1"} 2
        herald_latency_seconds_bucket{le="+Inf"} 3
        herald_latency_seconds_sum 5.55
        herald_latency_seconds_count 3
        # HELP herald_queue_depth Depth.
        # TYPE herald_queue_depth gauge
        herald_queue_depth 7

        """)
        #expect(m.total("herald_deliveries_total") == 1)
    }

    @Test func spellingSuggestions() {
        #expect(Spelling.closest(to: "levle", in: ["level", "format"]) == "level")
        #expect(Spelling.closest(to: "zzzzzz", in: ["level"]) == nil)
    }

    @Test func testClockWakesSleepersInOrder() async throws {
        let clock = TestClock()
        let start = clock.now
        let woke = Locked<[Int]>([])
        let a = Task { try await clock.sleep(until: start.addingTimeInterval(2)); woke.withLock { $0.append(2) } }
        let b = Task { try await clock.sleep(until: start.addingTimeInterval(1)); woke.withLock { $0.append(1) } }
        #expect(await clock.waitForSleepers(2))
        clock.advance(by: 1)
        try await b.value
        #expect(woke.value == [1])
        clock.advance(by: 1)
        try await a.value
        #expect(woke.value == [1, 2])
        let c = Task { try await clock.sleep(until: start.addingTimeInterval(100)) }
        #expect(await clock.waitForSleepers(1))
        c.cancel()
        await #expect(throws: CancellationError.self) { try await c.value }
    }
}

@Suite struct KeyedAsyncLockTests {
    @Test func holdersOfDisjointKeysRunTogetherAndSharedKeysWait() async {
        let lock = KeyedAsyncLock<Int>()
        let log = Locked<[String]>([])
        let inside = WakeSignal(), release = WakeSignal()
        async let a: Void = lock.run([1, 2]) {
            log.withLock { $0.append("a in") }
            inside.notify()
            await release.wait()
            log.withLock { $0.append("a out") }
        }
        await inside.wait()
        // Disjoint: runs while a holds 1 and 2.
        await lock.run([3]) { log.withLock { $0.append("c") } }
        // Shares 2: waits for a.
        async let b: Void = lock.run([2, 4]) { log.withLock { $0.append("b") } }
        try? await Task.sleep(nanoseconds: 50_000_000)
        #expect(log.withLock { $0 } == ["a in", "c"])
        release.notify()
        _ = await (a, b)
        #expect(log.withLock { $0 } == ["a in", "c", "a out", "b"])
    }

    /// A holder of every key waits for the holders before it; a later holder of any key, even
    /// one nobody holds, waits for it (no overtaking), and runs once it is done.
    @Test func aHolderOfEveryKeyWaitsForThoseBeforeItAndHoldsBackThoseAfter() async {
        let lock = KeyedAsyncLock<Int>()
        let log = Locked<[String]>([])
        let inside = WakeSignal(), release = WakeSignal()
        async let a: Void = lock.run([1]) {
            log.withLock { $0.append("a in") }
            inside.notify()
            await release.wait()
            log.withLock { $0.append("a out") }
        }
        await inside.wait()
        async let all: Void = lock.runAll { log.withLock { $0.append("all") } }
        try? await Task.sleep(nanoseconds: 50_000_000)
        // Key 9 is free, but the holder of every key came first.
        async let c: Void = lock.run([9]) { log.withLock { $0.append("c") } }
        try? await Task.sleep(nanoseconds: 50_000_000)
        #expect(log.withLock { $0 } == ["a in"])
        release.notify()
        _ = await (a, all, c)
        #expect(log.withLock { $0 } == ["a in", "a out", "all", "c"])
        // Free again: each kind runs at once.
        await lock.runAll { log.withLock { $0.append("all again") } }
        await lock.run([1, 9]) { log.withLock { $0.append("d") } }
        #expect(log.withLock { $0 }.suffix(2) == ["all again", "d"])
    }
}
