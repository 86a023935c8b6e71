import Foundation
@testable import Kafka
import Testing

@Suite("Kafka round trip on the embedded broker", .serialized)
struct KafkaRoundTripTests {
    @Test("100k records with keys, headers and timestamps come back intact through a group with manual commits")
    func hundredThousandRecords() throws {
        let broker = try EmbeddedBroker(brokers: 3)
        try broker.createTopic("rt", partitions: 8)
        let (producer, deliveries) = try KafkaTestSupport.makeProducer(broker)
        let count = 100_000
        let baseTime: Int64 = 1_795_300_000_000
        for i in 0..<count {
            try producer.send(
                topic: "rt", key: Array("key-\(i % 997)".utf8), value: Array("value-\(i)".utf8),
                headers: [KafkaHeader(key: "seq", string: "\(i)"), KafkaHeader(key: "empty", value: nil)],
                timestamp: baseTime + Int64(i), token: UInt64(i))
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        #expect(deliveries.delivered == count)
        #expect(deliveries.failures.isEmpty)

        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "rt-group"))
        try consumer.subscribe(topics: ["rt"])
        var seen = [Bool](repeating: false, count: count)
        var received = 0
        var mismatches = 0
        var next: [Int32: Int64] = [:]
        KafkaTestSupport.pollUntil(consumer, { record in
            let value = String(decoding: record.value!, as: UTF8.self)
            let i = Int(value.dropFirst("value-".count))!
            let headers = record.headers
            if String(decoding: record.key!, as: UTF8.self) != "key-\(i % 997)"
                || record.timestamp != baseTime + Int64(i)
                || headers.first(where: { $0.key == "seq" })?.stringValue != "\(i)"
                || headers.first(where: { $0.key == "empty" }).map({ $0.value == nil }) != true
            {
                mismatches += 1
            }
            if !seen[i] { seen[i] = true; received += 1 }
            next[record.partition] = record.offset + 1
        }, stop: { received == count })
        #expect(received == count)
        #expect(mismatches == 0)

        let offsets = next.map { TopicPartitionOffset(topic: "rt", partition: $0.key, offset: $0.value, metadata: "checkpoint") }
        try consumer.commit(offsets)
        let committed = try consumer.committed(offsets.map(\.topicPartition))
        #expect(Set(committed.map { "\($0.partition)@\($0.offset)" }) == Set(offsets.map { "\($0.partition)@\($0.offset)" }))
        #expect(committed.allSatisfy { $0.metadata == "checkpoint" })
        consumer.close()
    }

    @Test("another group's commits, with their metadata, read through a client of another group id (ListConsumerGroupOffsets); a partition it never committed, and a group that never committed, read as nothing committed")
    func anotherGroupsCommits() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("theirs", partitions: 3)
        let owner = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "owner"))
        let commits = [
            TopicPartitionOffset(topic: "theirs", partition: 0, offset: 7, metadata: "checkpoint-0"),
            TopicPartitionOffset(topic: "theirs", partition: 2, offset: 11, metadata: "checkpoint-2"),
        ]
        try owner.commit(commits)
        owner.close()

        let asker = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "asker"))
        let partitions = (0..<3).map { TopicPartition(topic: "theirs", partition: Int32($0)) }
        let read = try asker.committed(by: "owner", partitions)
        #expect(read.map(\.topicPartition) == partitions, "in the order asked")
        #expect(read.map(\.offset) == [7, KafkaOffset.invalid, 11])
        #expect(read.map(\.metadata) == ["checkpoint-0", nil, "checkpoint-2"])
        #expect(try asker.committed(partitions).map(\.offset) == [KafkaOffset.invalid, KafkaOffset.invalid, KafkaOffset.invalid], "its own group committed nothing")
        #expect(try asker.committed(by: "nobody", partitions).map(\.offset) == [KafkaOffset.invalid, KafkaOffset.invalid, KafkaOffset.invalid])
        asker.close()
    }

    @Test("a restarted consumer resumes at the committed offset, not at what it had read")
    func resumesAtCommittedOffset() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("resume", partitions: 1)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        for i in 0..<100 { try producer.send(topic: "resume", partition: 0, key: nil, value: Array("\(i)".utf8)) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)

        do {
            let first = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "resume-group"))
            try first.subscribe(topics: ["resume"])
            var read = 0
            KafkaTestSupport.pollUntil(first, { _ in read += 1 }, stop: { read >= 100 })
            #expect(read == 100)
            // Only the first 40 were "processed": commit 40 (the next offset to read).
            try first.commit([TopicPartitionOffset(topic: "resume", partition: 0, offset: 40)])
            first.close()
        }

        let second = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "resume-group"))
        try second.subscribe(topics: ["resume"])
        var firstOffset: Int64?
        var values: [String] = []
        KafkaTestSupport.pollUntil(second, { record in
            if firstOffset == nil { firstOffset = record.offset }
            values.append(String(decoding: record.value!, as: UTF8.self))
        }, stop: { values.count >= 60 })
        #expect(firstOffset == 40)
        #expect(values.first == "40")
        #expect(values.count == 60)
        second.close()
    }

    @Test("watermarks, offsets for a timestamp and seek find the records a backfill needs")
    func watermarksTimestampsAndSeek() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("wm", partitions: 1)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        for i in 0..<50 {
            try producer.send(topic: "wm", partition: 0, key: nil, value: Array("\(i)".utf8), timestamp: 1_000_000 + Int64(i) * 1000)
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "wm-group"))
        let tp = TopicPartition(topic: "wm", partition: 0)
        let marks = try consumer.watermarks(tp)
        #expect(marks.low == 0)
        #expect(marks.high == 50)
        // librdkafka's mock cluster answers ListOffsets only for the logical timestamps
        // (-1 latest, -2 earliest), not for a search by time; those prove the request path.
        let latest = try consumer.offsets(forTimestamp: -1, partitions: [tp])
        let earliest = try consumer.offsets(forTimestamp: -2, partitions: [tp])
        #expect(latest.first?.offset == 50)
        #expect(earliest.first?.offset == 0)

        try consumer.assign([TopicPartitionOffset(tp, offset: 0)])
        var firstSeen: [Int64] = []
        KafkaTestSupport.pollUntil(consumer, { firstSeen.append($0.offset) }, stop: { !firstSeen.isEmpty })
        try consumer.seek([TopicPartitionOffset(tp, offset: 45)])
        var afterSeek: [Int64] = []
        KafkaTestSupport.pollUntil(consumer, { afterSeek.append($0.offset) }, stop: { afterSeek.contains(49) })
        #expect(afterSeek.contains(45))
        #expect(afterSeek.last == 49)
    }

    @Test("the end of each partition is reported when partition EOF is on")
    func partitionEOF() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("eof", partitions: 2)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        for i in 0..<10 { try producer.send(topic: "eof", partition: Int32(i % 2), key: nil, value: [UInt8(i)]) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        let consumer = try KafkaConsumer(
            config: KafkaTestSupport.consumerConfig(broker, group: "eof-group", extra: ["enable.partition.eof": "true"]))
        try consumer.subscribe(topics: ["eof"])
        var ends: [Int32: Int64] = [:]
        var records = 0
        let deadline = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while ends.count < 2 && Date() < deadline {
            consumer.poll(timeoutMilliseconds: 100) { event in
                switch event {
                case .record: records += 1
                case .partitionEOF(let tp, let offset): ends[tp.partition] = offset
                case .error: break
                }
            }
        }
        #expect(records == 10)
        #expect(ends == [0: 5, 1: 5])
    }
}
