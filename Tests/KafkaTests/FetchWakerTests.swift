import Foundation
@testable import Kafka
import Testing

/// A consumer with a shallow prefetch whose fetcher stops at the queue's bounds over and over:
/// it reads everything in order without waiting on a stalled fetcher; on librdkafka 2.0.2 (up to
/// 2.1) because it is woken, and it leaves the fetcher alone once caught up; from 2.2 on because
/// the fetcher's backoff is short (`KafkaConsumer`'s `wakesFetcher`).
@Suite("Fetch waker on the embedded broker", .serialized)
struct FetchWakerTests {
    @Test("a shallow prefetch that stops the fetcher again and again: every record in order; on 2.0.2 the fetcher woken, and no waking once caught up; from 2.2 on the short fetch backoff in force")
    func shallowPrefetchReadsEverything() throws {
        let broker = try EmbeddedBroker(brokers: 3)
        try broker.createTopic("shallow", partitions: 6)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        let count = 30_000
        let padding = String(repeating: "x", count: 80)
        for i in 0..<count {
            try producer.send(topic: "shallow", partition: Int32(i % 6), key: nil, value: Array("\(i) \(padding)".utf8))
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)

        // The fetcher stops once 300 messages (or 16 KB of them) wait; each answer brings more.
        let consumer = try KafkaConsumer(
            config: KafkaTestSupport.consumerConfig(
                broker, group: "shallow-group", extra: ["queued.min.messages": "300", "queued.max.messages.kbytes": "16"]),
            maxBatch: 100, wakesFetcher: true)
        try consumer.assign((0..<6).map { TopicPartitionOffset(topic: "shallow", partition: $0, offset: KafkaOffset.beginning) })
        var next = [Int](repeating: 0, count: 6)
        var outOfOrder = 0
        var received = 0
        // Polls that waited their whole 100 ms for nothing while records were still to come:
        // the fetcher had stopped at the bounds and did not look again, or the machine was busy.
        // Measured on a quiet machine: none on 2.0.2 with the waker and on 2.16 with the short
        // backoff; 153 on 2.16 with its default backoff of a second (what a wake cannot shorten
        // there). Printed, not bounded: a count of wall-clock waits is a speed figure, and on a
        // loaded machine it reached 30 with the waker working (docs/performance.md measures
        // stalls as `poll (nothing came)`). What the test holds to is the mechanism below: the
        // fetcher woken on 2.0.2, the short backoff in force from 2.2 on.
        var emptyPolls = 0
        let deadline = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while received < count && Date() < deadline {
            let events = consumer.poll(timeoutMilliseconds: 100) { event in
                guard case .record(let record) = event else { return }
                let value = String(decoding: record.value!, as: UTF8.self)
                let i = Int(value.prefix { $0 != " " })!
                let partition = Int(record.partition)
                if i != next[partition] * 6 + partition { outOfOrder += 1 }
                next[partition] += 1
                received += 1
            }
            if events == 0 && received > 0 { emptyPolls += 1 }
        }
        #expect(received == count)
        #expect(outOfOrder == 0)
        print("fetch waker: \(emptyPolls) polls of 100 ms came back empty while records were still to come")
        guard !Librdkafka.hasFetchQueueBackoff else {
            // librdkafka 2.2 and later: no waker (a wake inside the backoff fetches nothing), a
            // short backoff instead.
            #expect(consumer.fetchWakes == nil)
            #expect(consumer.effectiveProperty("fetch.queue.backoff.ms") == KafkaConsumer.fetchQueueBackoffMilliseconds)
            consumer.close()
            return
        }
        let woken = consumer.fetchWakes ?? 0
        #expect(woken >= 1, "the fetcher stopped at the bounds and was never woken")

        // Caught up: the queue stays empty. A wake that changed nothing may be followed by one
        // more (the policy's halving, down to an empty queue), then none: idle polls settle.
        var rounds: [Int] = []
        repeat {
            for _ in 0..<20 { consumer.poll(timeoutMilliseconds: 10) { _ in } }
            awaitWake(consumer)
            rounds.append(consumer.fetchWakes ?? 0)
        } while rounds.count < 10 && (rounds.count < 2 || rounds[rounds.count - 1] != rounds[rounds.count - 2])
        #expect(rounds.count < 10, "a caught-up consumer kept waking its fetcher: \(rounds)")
        #expect(rounds.last! - woken <= 2, "a caught-up consumer woke its fetcher \(rounds.last! - woken) times")
        consumer.close()
    }

    /// Waits until no wake is in flight (its answer counts it).
    func awaitWake(_ consumer: KafkaConsumer) {
        let deadline = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while consumer.isWakingFetcher && Date() < deadline { usleep(1_000) }
    }

    @Test("a consumer that does not wake its fetcher has no waker")
    func offByDefault() throws {
        let consumer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": "127.0.0.1:1", "group.id": "off", "log_level": "0"]))
        #expect(consumer.fetchWakes == nil)
    }
}
