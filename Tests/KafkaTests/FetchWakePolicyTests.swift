import Testing
@testable import Kafka

/// The fetch waker's decisions, from the queue lengths a consumer sees around each gather.
@Suite("Fetch wake policy")
struct FetchWakePolicyTests {
    /// A consumer's view of its queue, gather after gather: 1,000 messages or 100 KB of
    /// payload; messages of 50 bytes make the count bind first.
    final class Consumer {
        var policy = FetchWakePolicy(minMessages: 1_000, maxBytes: 100_000)

        /// One gather: the queue held `before` and the consumer took `take` messages of `size`
        /// bytes. Returns whether to wake.
        func gather(before: Int, take: Int, size: Int = 50, inFlight: Bool = false) -> Bool {
            policy.beforeGathering(queued: before)
            return policy.afterGathering(queued: before - take, messages: take, payloadBytes: take * size, wakeInFlight: inFlight)
        }

        var armed: Bool { policy.armed }
    }

    @Test("a fetcher that stopped at the message threshold is woken once the queue drains below it, once")
    func wakesOnceBelowTheCount() {
        let p = Consumer()
        // The fetcher delivered 1,200 messages and stopped (1,200 >= 1,000).
        #expect(!p.gather(before: 1_200, take: 100))  // 1,100 left: still at the threshold
        #expect(!p.gather(before: 1_100, take: 100))  // 1,000 left
        #expect(p.gather(before: 1_000, take: 100))  // 900: the fetcher would fetch if it looked
        #expect(!p.gather(before: 900, take: 100))  // 800: woken already, not halved yet
        // The fetcher delivered again (800 + 150), below the threshold: it goes on by itself.
        #expect(!p.gather(before: 950, take: 400))
        #expect(!p.armed)
        #expect(!p.gather(before: 550, take: 500))
    }

    @Test("a fetcher that keeps up (the queue never reaches a threshold) is never woken")
    func neverWakesAFetcherThatKeepsUp() {
        let p = Consumer()
        var queued = 0
        for _ in 0..<100 {
            // 300 arrive before each gather, 300 are taken: the queue stays below 1,000.
            #expect(!p.gather(before: queued + 300, take: 300))
            queued = 0
        }
        #expect(!p.armed)
    }

    @Test("a wake that changed nothing is repeated each time the queue halves, and a caught-up consumer stops the waking")
    func repeatsWhileDrainingThenStops() {
        let p = Consumer()
        #expect(!p.gather(before: 1_500, take: 400))  // 1,100: stopped
        #expect(p.gather(before: 1_100, take: 200))  // 900: wake
        #expect(!p.gather(before: 900, take: 300))  // 600: not halved since the wake
        #expect(p.gather(before: 600, take: 200))  // 400 <= 450: again
        #expect(p.gather(before: 400, take: 300))  // 100 <= 200
        #expect(p.gather(before: 100, take: 100))  // 0 <= 50
        // Empty and nothing arrives (the end of the partitions): no more wakes.
        for _ in 0..<50 { #expect(!p.gather(before: 0, take: 0)) }
    }

    @Test("one wake at a time: none while the last is unanswered")
    func oneWakeInFlight() {
        let p = Consumer()
        #expect(!p.gather(before: 1_200, take: 100))
        #expect(!p.gather(before: 1_100, take: 200, inFlight: true))
        #expect(p.gather(before: 900, take: 50))
    }

    @Test("large messages: the payload threshold, estimated from the messages gathered, decides")
    func payloadThreshold() {
        let p = Consumer()
        // 10 KB messages: 100 KB is 10 messages, far below the 1,000-message count.
        #expect(!p.gather(before: 12, take: 2, size: 10_000))  // 10 left, 100 KB: stopped
        #expect(!p.gather(before: 10, take: 1, size: 10_000))  // 9: 90 KB, not below 90 %
        #expect(p.gather(before: 9, take: 1, size: 10_000))  // 8: 80 KB, wake
    }

    @Test("the fetcher delivering while the consumer gathered counts: a stop seen only through what was taken since")
    func deliveryDuringAGather() {
        let p = Consumer()
        #expect(!p.gather(before: 200, take: 200))  // drained
        // During the next gather the fetcher delivered 1,100 (and stopped at 1,100 >= 1,000);
        // the consumer took 300 of them before looking: 800 left, below the threshold.
        p.policy.beforeGathering(queued: 0)
        let wake = p.policy.afterGathering(queued: 800, messages: 300, payloadBytes: 300 * 50, wakeInFlight: false)
        #expect(wake)
    }

    @Test("a queue emptied without consuming (a rebalance dropped what was prefetched) starts no episode")
    func purgeIsNotADelivery() {
        let p = Consumer()
        #expect(!p.gather(before: 500, take: 100))
        p.policy.beforeGathering(queued: 0)  // 400 purged
        let wake = p.policy.afterGathering(queued: 0, messages: 0, payloadBytes: 0, wakeInFlight: false)
        #expect(!wake)
        #expect(!p.armed)
    }
}
