import Foundation
import HeraldCore
import Testing

/// The one blocking-worker mechanism: order, batches, close, idle ticks, and the thread checks
/// of ``ThreadConfined``.
@Suite struct BlockingWorkerTests {
    /// Records what the thread did.
    final class Log: @unchecked Sendable {
        let lock = ConditionLock()
        var batches: [[Int]] = []
        var threads: [ThreadID] = []
        var ticks = 0
        var started = 0
        var finished = 0
        var gateOpen = false
        var inFirstJob = false

        func waitUntil(_ seconds: Double = 10, _ condition: () -> Bool) -> Bool {
            let end = Date().addingTimeInterval(seconds)
            lock.lock()
            defer { lock.unlock() }
            while !condition() {
                if Date() > end { return false }
                _ = lock.wait(seconds: 0.05)
            }
            return true
        }
    }

    static func worker(_ log: Log, maxBatch: Int = 3, idle: @escaping () -> Double? = { nil }) -> BlockingWorker<Int> {
        BlockingWorker(name: "test-worker", maxBatch: maxBatch, body: .init(
            run: { jobs in
                log.lock.withLock {
                    log.batches.append(jobs)
                    log.threads.append(ThreadID.current)
                    if jobs == [0] {
                        log.inFirstJob = true
                        log.lock.broadcast()
                        while !log.gateOpen { log.lock.wait() }
                    }
                }
            },
            idle: idle,
            tick: { log.lock.withLock { log.ticks += 1; log.lock.broadcast() } },
            started: { log.lock.withLock { log.started += 1 } },
            finished: { log.lock.withLock { log.finished += 1; log.lock.broadcast() } }))
    }

    @Test func jobsRunInOrderOnItsThreadInBatchesOfAtMostMaxBatch() {
        let log = Log()
        let worker = Self.worker(log)
        #expect(worker.submit(0))
        // Hold the thread in job 0 so the next nine queue up behind it.
        #expect(log.waitUntil { log.inFirstJob })
        for i in 1...9 { #expect(worker.submit(i, counted: i % 2 == 0)) }
        #expect(worker.waiting == 9)
        #expect(worker.countedWaiting == 4)
        log.lock.withLock { log.gateOpen = true; log.lock.broadcast() }
        worker.close()
        #expect(log.batches == [[0], [1, 2, 3], [4, 5, 6], [7, 8, 9]])
        #expect(log.threads.allSatisfy { $0 == worker.thread })
        #expect(!worker.thread.isCurrent)
        #expect(worker.countedWaiting == 0 && worker.waiting == 0)
        #expect(log.started == 1 && log.finished == 1)
    }

    @Test func closeRunsWhatIsQueuedThenRefusesNewJobs() {
        let log = Log()
        let worker = Self.worker(log, maxBatch: 100)
        #expect(worker.submit(0))
        #expect(log.waitUntil { log.inFirstJob })
        #expect(worker.submit(1) && worker.submit(2))
        worker.stop()                    // no new jobs from now on…
        #expect(worker.isClosed)
        #expect(!worker.submit(3))       // …refused, the caller is told
        log.lock.withLock { log.gateOpen = true; log.lock.broadcast() }
        worker.close()                   // …and those queued before still run
        #expect(log.batches == [[0], [1, 2]])
        #expect(log.finished == 1)
    }

    @Test func anIdleWorkerTicksWhenItsBodyAsks() {
        let log = Log()
        let worker = Self.worker(log, idle: { log.ticks < 3 ? 0.01 : nil })
        #expect(log.waitUntil { log.ticks == 3 })
        worker.close()
        #expect(log.batches.isEmpty && log.ticks == 3)
    }

    @Test func droppingTheLastReferenceEndsTheThread() {
        let log = Log()
        do {
            let worker = Self.worker(log)
            log.lock.withLock { log.gateOpen = true }
            #expect(worker.submit(5))
        }
        #expect(log.waitUntil { log.finished == 1 })
        #expect(log.batches == [[5]])
    }

    @Test func blockingThreadRunsOnItsOwnThread() async throws {
        let thread = BlockingThread(name: "test-blocking")
        let id = thread.thread
        let ranOn = try await thread.run { ThreadID.current == id }
        #expect(ranOn)
        thread.stop()
        await #expect(throws: StoreError.self) { try await thread.run { 1 } }
    }

    @Test func aConfinedValueIsUsableOnItsThreadAndUnconfinedBeforeItIsHandedOver() async throws {
        let thread = BlockingThread(name: "test-confined")
        let box = ThreadConfined([1, 2])
        box.value.append(3)              // not yet confined: the thread that made it may set it up
        box.confine(to: thread.thread)
        let sum = try await thread.run { box.value.append(4); return box.value.reduce(0, +) }
        #expect(sum == 10)
        thread.stop()
    }

    @Test func touchingAConfinedValueFromAnotherThreadTraps() async {
        await #expect(processExitsWith: .failure) {
            let thread = BlockingThread(name: "test-trap")
            let box = ThreadConfined(0, to: thread.thread)
            box.value += 1               // this thread is not its owner
        }
    }
}
