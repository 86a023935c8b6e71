import Foundation
import Kafka
import Pipeline
import Testing
import TrackpipeTestSupport
import Windowing

/// A closed window's record goes out with a commit made when the window closes, not at the
/// next interval (issue "a closed window readable within a second"). The interval here is an
/// hour, so a record that appears at all came with an early commit.
@Suite("early commits: a closed window is released without waiting for the commit interval", .serialized)
struct EarlyCommitTests {
    /// 2026-11-22T02:00:00Z, the start of a minute.
    static let base: Int64 = 1_795_312_800_000

    func hit(_ delivery: String, _ broadlog: String, at time: Int64) -> [UInt8] {
        Array(#"{"deliveryId":"\#(delivery)","broadlogId":"\#(broadlog)","action":"7","timestamp":\#(time)}"#.utf8)
    }

    func produce(_ hits: [(partition: Int32, value: [UInt8])], on broker: EmbeddedBroker) throws {
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        for hit in hits { try producer.send(topic: "hits", partition: hit.partition, key: nil, value: hit.value) }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
    }

    @Test(
        "a live worker with an hour's commit interval: each window's record appears once event time passes its end plus grace, with its full counts; a window still open stays unseen",
        arguments: [false, true])
    func closedWindowsGoOut(keyedByDelivery: Bool) throws {
        // As many input partitions as the internal topics have: the single stage's state topic
        // has one partition per input partition.
        let partitions = Int32(TestTopics.internalTopicPartitions)
        let broker = try TestTopics.broker(inputPartitions: Int(partitions))
        let group = keyedByDelivery ? "early-one" : "early-two"
        var config = TestTopics.config(broker, group: group, window: WindowConfig(size: 60_000, grace: 1_000, idleTimeout: 3_600_000), shards: 1)
        config.commitInterval = 3_600_000
        config.inputKeyedByDelivery = keyedByDelivery
        let worker = LiveWorker(config)
        defer { _ = try? worker.stop() }

        // No partition goes idle within the test: only event time closes windows. The first
        // minute: three recipients of d1, spread over partitions unless the input is keyed by
        // delivery.
        let d1Partition = DeliveryHash.partition(of: "d1", count: partitions)
        try produce(
            (1...3).map { n in (partition: keyedByDelivery ? d1Partition : Int32(n) % partitions, value: hit("d1", "b\(n)", at: Self.base + Int64(n) * 1_000)) },
            on: broker)
        // Event time passes the first minute's end plus grace on every input partition; the
        // second minute stays open.
        let later = Self.base + 60_000 + 5_000
        try produce(
            (0..<partitions).map { p in (partition: p, value: hit(p == d1Partition ? "d1" : "d\(p + 2)", "b\(p + 4)", at: later)) }, on: broker)

        var out: TopicContents?
        let key = "d1@2026-11-22T02:00:00Z"
        #expect(
            try eventually {
                out = try TestTopics.contents(broker)
                return out?.lastByKey[key] != nil
            }, "no record of the closed window; records: \(out?.lastByKey.keys.sorted() ?? [])")
        let record = try #require(out?.lastByKey[key])
        #expect(record["impressions"] as? Int == 3)
        #expect(record["uniqueImpressions"] as? Int == 3)
        #expect(record["revision"] as? Int == 3)
        // The second minute is open: no record of it has been released.
        #expect(out?.lastByKey.keys.contains { $0.hasSuffix("@2026-11-22T02:01:00Z") } == false)
    }
}
