import Foundation
import Kafka
import Logging
@testable import Pipeline
@testable import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
import Windowing

/// Stepping back from each partition's end to its newest record of a kind, on the embedded
/// broker: what the output topic's check and the internal topics' writer checks read.
@Suite("The newest records of a topic, stepping back over others")
struct NewestRecordsTests {
    static let minute: Int64 = 60_000

    /// An aggregate record's value, of a window `size` long.
    static func aggregate(_ delivery: String, size: Int64) -> [UInt8] {
        let start: Int64 = 1_795_000_000_000 / size * size
        return Array(
            "{\"deliveryId\":\"\(delivery)\",\"windowStart\":\"\(RFC3339.format(epochMillis: start))\",\"windowEnd\":\"\(RFC3339.format(epochMillis: start + size))\",\"revision\":1}"
                .utf8)
    }

    /// Appends records (value nil: a tombstone) to one partition, in order.
    static func append(_ values: [[UInt8]?], to topic: String, partition: Int32, on broker: EmbeddedBroker) throws {
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3", "linger.ms": "5"]))
        for (index, value) in values.enumerated() {
            try producer.send(topic: topic, partition: partition, key: Array("k\(index)".utf8), value: value)
        }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
    }

    static let junk: [UInt8] = Array("{\"someone\":\"else\"}".utf8)

    func consumer(_ broker: EmbeddedBroker) -> KafkaConfig {
        KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "tail-\(UUID())", "log_level": "3", "enable.partition.eof": "true"])
    }

    /// Six partitions: empty; one aggregate; a 5m then a 1m aggregate, then tombstones and junk;
    /// an aggregate then 100 others; 30 others alone; an aggregate then 99 others.
    func tail(_ broker: EmbeddedBroker) throws {
        try broker.createTopic("tail", partitions: 6)
        try Self.append([Self.aggregate("d1", size: Self.minute)], to: "tail", partition: 1, on: broker)
        try Self.append(
            [Self.aggregate("d2", size: 5 * Self.minute), Self.aggregate("d2", size: Self.minute), nil, Self.junk, nil, nil, Array("not json".utf8), nil],
            to: "tail", partition: 2, on: broker)
        try Self.append([Self.aggregate("d3", size: 5 * Self.minute)] + (0..<100).map { $0 % 2 == 0 ? nil : Self.junk }, to: "tail", partition: 3, on: broker)
        try Self.append((0..<30).map { $0 % 3 == 0 ? nil : Self.junk }, to: "tail", partition: 4, on: broker)
        try Self.append([Self.aggregate("d5", size: 5 * Self.minute)] + Array(repeating: nil, count: 99), to: "tail", partition: 5, on: broker)
    }

    @Test("each partition's newest aggregate is found behind tombstones and other records, within 100 offsets; an empty partition, or one with none down to its start, holds none; beyond the bound it cannot be told")
    func stepsBack() throws {
        let broker = try EmbeddedBroker()
        try tail(broker)
        let reader = TopicReader(config: consumer(broker), clients: LibrdkafkaClients(), logger: Logger(label: "test"))
        let found = try NewestRecords.find(in: "tail", partitions: 6, reader: reader) {
            $0.value.flatMap(WindowSizeCheck.windowSize(ofRecord:))
        }
        #expect(found.count == 6)
        func said(_ partition: Int32) -> String {
            switch found[partition] {
            case .recognised(let size, let offset): "\(size / 1000) s at \(offset)"
            case .absent: "absent"
            case .undecided(let skipped): "undecided: \(skipped.tombstones) tombstones, \(skipped.others) others"
            case nil: "missing"
            }
        }
        #expect(said(0) == "absent", "an empty partition")
        #expect(said(1) == "60 s at 0", "the first record, the only one")
        #expect(said(2) == "60 s at 1", "the newest aggregate, behind tombstones and junk")
        #expect(said(3) == "undecided: 50 tombstones, 50 others", "the 100 newest offsets were read, not the 101st")
        #expect(said(4) == "absent", "others down to the log start: no aggregate there at all")
        #expect(said(5) == "300 s at 0", "an aggregate 100 offsets back")
    }

    @Test("the output check: one partition's newest aggregate of another size refuses; a partition that cannot be told refuses unless --allow-unchecked-output; none of another size passes")
    func outputCheck() throws {
        let broker = try EmbeddedBroker()
        try tail(broker)
        let given = GivenSetting(flag: "window", text: "5m", source: .environment)
        let admin = try TopicAdmin(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        func check(_ window: Int64, allow: Bool = false, partitions: Int = 6) throws {
            _ = try WindowSizeCheck.checkOutput(
                topic: "tail", partitions: partitions, window: window, given: given, allowUnchecked: allow, admin: admin,
                reader: TopicReader(config: consumer(broker), clients: LibrdkafkaClients(), logger: Logger(label: "test")), logger: Logger(label: "test"))
        }
        // 5m: partitions 1 and 2 end in 1-minute aggregates (behind tombstones and junk in 2).
        #expect {
            try check(5 * Self.minute, allow: true)
        } throws: { error in
            let text = "\(error)"
            return text.contains("the output topic tail holds windows of 1m (the newest aggregate record of tail[1] says so), and this run writes windows of TRACKPIPE_WINDOW=5m")
                && text.contains("go back to TRACKPIPE_WINDOW=1m") && !text.contains("--window") && PipelineError.exitCode(for: error) == 64
        }
        // 1m: partitions 3 and 5 end in 5-minute aggregates, 3 behind more than the bound: 5 refuses.
        #expect {
            try check(Self.minute, allow: true)
        } throws: { error in
            "\(error)".contains("holds windows of 5m (the newest aggregate record of tail[5] says so)")
        }
        // Partitions 0 to 4 under 1m: 3 cannot be told.
        #expect {
            try check(Self.minute, partitions: 5)
        } throws: { error in
            let text = "\(error)"
            return text.contains("the output topic tail cannot be checked for windows of another size: the newest 100 offsets of tail[3] hold no aggregate record (50 tombstones, 50 other records)")
                && text.contains("--allow-unchecked-output (TRACKPIPE_ALLOW_UNCHECKED_OUTPUT=true)") && PipelineError.exitCode(for: error) == 64
        }
        try check(Self.minute, allow: true, partitions: 5)
        try check(Self.minute, partitions: 3)
        try check(5 * Self.minute, partitions: 1)
    }

    @Test("after a run's first records: another size written since its start-up check, below its first record on a partition or in a partition it has not written to, stops it (64); another size after its first on the same partition is left to that writer; older records, tombstones, others' records and its own size do not count")
    func checkWritten() throws {
        let broker = try EmbeddedBroker()
        let admin = try TopicAdmin(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let (one, five) = (Self.aggregate("d", size: Self.minute), Self.aggregate("d", size: 5 * Self.minute))
        func check(_ topic: String, _ window: Int64, since: [Int32: Int64] = [:], wrote: [Int32: Range<Int64>]) throws {
            try WindowSizeCheck.checkWritten(
                topic: topic, since: since, written: AcknowledgedRecords(spans: wrote, count: wrote.values.map(\.count).reduce(0, +)), window: window,
                given: GivenSetting(flag: "window", text: WindowSize.text(window), source: .commandLine), group: "g", admin: admin,
                reader: TopicReader(config: consumer(broker), clients: LibrdkafkaClients(), logger: Logger(label: "test")), logger: Logger(label: "test"))
        }
        func refusal(_ error: any Error, _ parts: String...) -> Bool {
            PipelineError.exitCode(for: error) == 64 && parts.allSatisfy { "\(error)".contains($0) }
        }

        // One after the other: the 1m run wrote after[0]@0 and checked, then the 5m run wrote
        // after[0]@1. after[1] ended in a 5m record, tombstones and junk before either started
        // (where both start-up checks read it to end: offset 4), and then got another run's 1m.
        try broker.createTopic("after", partitions: 3)
        try Self.append([one, five], to: "after", partition: 0, on: broker)
        try Self.append([five, nil, Self.junk, nil, one], to: "after", partition: 1, on: broker)
        try Self.append([nil, Self.junk], to: "after", partition: 2, on: broker)
        try check("after", Self.minute, since: [1: 4], wrote: [0: 0..<1])
        #expect {
            try check("after", 5 * Self.minute, since: [1: 4], wrote: [0: 1..<2])
        } throws: {
            refusal(
                $0, "another run writes windows of 1m into the output topic after (an aggregate record of that size at after[0] offset 0, written since this run started and before this run's first record there, at 1), and this run writes windows of --window 5m.",
                "this run stops, and leaves the topic to the other. Its first records stay in after (1 at after[0] offset 1): a reader tells them by their size, windowEnd - windowStart = 5m.",
                "Run this pipeline again under a new --group (g has counted and written these windows) with a new --output-topic")
        }
        // A 5m run that started after both wrote after[0], and wrote after[2]: after[1]'s 1m came
        // since, in a partition it has not written to.
        #expect {
            try check("after", 5 * Self.minute, since: [0: 2, 1: 4], wrote: [2: 0..<2])
        } throws: { refusal($0, "an aggregate record of that size at after[1] offset 4, written since this run started and in a partition this run has not written to") }

        // Crossed: each run wrote first in one partition, and each read the other's: both stop.
        try broker.createTopic("crossed", partitions: 3)
        try Self.append([one, five], to: "crossed", partition: 0, on: broker)
        try Self.append([five, one], to: "crossed", partition: 1, on: broker)
        try Self.append([five, five], to: "crossed", partition: 2, on: broker)
        #expect {
            try check("crossed", Self.minute, wrote: [0: 0..<1, 1: 1..<2])
        } throws: { refusal($0, "another run writes windows of 5m", "at crossed[1] offset 0, written since this run started and before this run's first record there, at 1") }
        #expect {
            try check("crossed", 5 * Self.minute, wrote: [0: 1..<2, 1: 0..<1, 2: 0..<2])
        } throws: { refusal($0, "another run writes windows of 1m", "at crossed[0] offset 0", "(4 at crossed[0] offset 1, crossed[1] offset 0, crossed[2] offsets 0 to 1)") }
    }
}
