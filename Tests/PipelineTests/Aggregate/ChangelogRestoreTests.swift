import Foundation
import Kafka
@testable import Pipeline
@testable import RecordFormats
import Testing
import TrackpipeTestSupport
import Windowing

/// Window state read back from the embedded broker by a real worker (the runner, its state
/// restorer, librdkafka), where a SIGKILL cut a merge short: the state partition holds a prefix of
/// the write that folded a window's segments into new ones, the group's commit is the one before.
@Suite("window state read back from the embedded broker", .serialized)
struct ChangelogRestoreTests {
    /// The state partition as a SIGKILL leaves it at each record of a merge (the records of the
    /// writes before, then that write's first records), the group's commit of the write before,
    /// the input and the output as they were: a worker started with `--until-end` reads the
    /// state back from the broker and ends with the counts of a run that never stopped.
    @Test("a merge cut short at any record, read back from the broker by a worker run to the end: the same counts")
    func mergeCutShortOnTheBroker() throws {
        let unit = ChangelogTests()
        let arena = RecordArena()
        let records = unit.input(arena, count: 90)
        let expected = try unit.reference(records, batch: 10)
        let run = try unit.recordedRun(records, batch: 3)
        let commit = try #require(run.indices.first { !ChangelogTests.merges(in: run[$0].write).isEmpty && $0 > 0 })
        let write = run[commit].write
        let merged = Set(ChangelogTests.merges(in: write))
        let touched = write.indices.filter { index in
            switch ChangelogRecord.decodeKey(write[index].key) {
            case .head(let window)?, .segment(let window, _)?: merged.contains(window)
            default: false
            }
        }
        let cuts = Array((touched.min()! + 1)...touched.max()!)
        #expect(cuts.count >= 2, "the merge takes several records: \(touched)")

        let point = try #require(run[commit - 1].point)
        // The recorded state and commit are the test group's (`g`, its state topic `g-state`),
        // which a worker checks before it joins: a broker of its own for each cut.
        let group = TestGroup.name
        for cut in cuts {
            let broker = try EmbeddedBroker()
            for topic in ["hits", "dlq", TestGroup.stateTopic, "\(group)-out"] { try broker.createTopic(topic, partitions: 1) }
            let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "linger.ms": "5", "log_level": "3"]))
            for record in records {
                try producer.send(topic: "hits", partition: 0, key: nil, value: record.value, timestamp: record.timestamp)
            }
            for record in run[..<commit].flatMap(\.write) + write.prefix(cut) {
                try record.key.withUnsafeBytes { key in
                    try record.value.withOptionalBytes { value in
                        try producer.send(topic: TestGroup.stateTopic, partition: 0, key: key, value: value)
                    }
                }
            }
            for output in run[..<commit].flatMap(\.output) {
                try Array(output.key.utf8).withUnsafeBytes { key in
                    try Array(output.value.utf8).withUnsafeBytes { value in try producer.send(topic: "\(group)-out", partition: 0, key: key, value: value) }
                }
            }
            try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
            let committer = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "3"]))
            try committer.commit([TopicPartitionOffset(topic: "hits", partition: 0, offset: point.offset, metadata: point.metadata)])
            committer.close()

            var config = TestTopics.config(broker, group: group, window: ChangelogTests.window)
            config.outputTopics = ["\(group)-out"]
            config.inputKeyedByDelivery = true
            config.untilEnd = true
            let log = CapturedLog()
            let worker = LiveWorker(config, logger: log.logger)
            let ended = try #require(worker.ended(), "the worker did not end")
            _ = try ended.get()
            #expect(log.all.contains { $0.1.contains("read back") && !$0.1.contains("read back 0 windows") }, "the state was read back")

            let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "reader-\(UUID())", "log_level": "3"]))
            var last: [String: String] = [:]
            for record in try reader.readToEnd(topic: "\(group)-out", partitions: 1) {
                last[String(decoding: record.key ?? [], as: UTF8.self)] = String(decoding: record.value ?? [], as: UTF8.self)
            }
            let differing = Set(last.keys).union(expected.keys).filter { last[$0] != expected[$0] }.sorted()
            #expect(differing.isEmpty, "cut after \(cut) of \(write.count) records: \(differing.prefix(3))")
        }
    }
}
