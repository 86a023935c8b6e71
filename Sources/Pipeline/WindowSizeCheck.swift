import Foundation
import Kafka
import Logging
import TrackingDomain

/// The window size is the one setting that changes what an output key means: under 1-minute
/// windows `d1@10:00:00Z` counts a minute, under 5-minute windows five. Records of two sizes in
/// one output topic overwrite each other, and a group's state counted with one size cannot go
/// on with another. Kafka Streams documents that a windowed store's size is fixed for an
/// application id; trackpipe refuses the change instead, before it writes anything. The other
/// settings (grace, retention, idle timeout, commit interval, shards) only change when records
/// appear, and may change between runs (docs/windowing.md, "What a group is fixed to").
enum WindowSizeCheck {
    /// `1m`, `5m`, `30s`, `1h`, `1500ms`: as `--window` takes it.
    static func text(_ millis: Int64) -> String {
        if millis % 3_600_000 == 0 { return "\(millis / 3_600_000)h" }
        if millis % 60_000 == 0 { return "\(millis / 60_000)m" }
        if millis % 1_000 == 0 { return "\(millis / 1_000)s" }
        return "\(millis)ms"
    }

    /// The refusal for a group whose commit says its windows were `counted` long.
    static func groupRefusal(counted: Int64, asked: Int64, topic: String, partition: Int32) -> PipelineError {
        .settingChanged(
            "the group counted windows of \(text(counted)) (its commit on \(topic)[\(partition)] says so), and this run asks for --window \(text(asked)). An output key <deliveryId>@<windowStart> names another window under each size, so records of both sizes would overwrite each other. Go back to --window \(text(counted)), or count with --window \(text(asked)) under a new --group and a new --output-topic (a new group counts the input from its beginning)")
    }

    /// Reads the last record of every partition of `topic` and returns the window sizes they
    /// hold (windowEnd − windowStart of each aggregate record found). Empty for an empty or
    /// missing topic. The tail is what a compacted topic, or a sink keeping the latest record,
    /// ends with.
    static func sizesInTail(of topic: String, partitions: Int, consumerConfig: KafkaConfig, logger: Logger) throws -> Set<Int64> {
        let reader = try KafkaConsumer(config: consumerConfig, logger: logger)
        defer { reader.close() }
        let all = (0..<Int32(partitions)).map { TopicPartition(topic: topic, partition: $0) }
        // Two requests for all partitions, not one per partition.
        let lows = Dictionary(uniqueKeysWithValues: try reader.beginningOffsets(all).map { ($0.partition, $0.offset) })
        let wanted = try reader.endOffsets(all).filter { $0.offset > (lows[$0.partition] ?? $0.offset) }
            .map { TopicPartitionOffset($0.topicPartition, offset: $0.offset - 1) }
        guard !wanted.isEmpty else { return [] }
        try reader.assign(wanted)
        var pending = Set(wanted.map(\.partition))
        var sizes: Set<Int64> = []
        let deadline = Date().addingTimeInterval(10)
        while !pending.isEmpty && Date() < deadline {
            reader.poll(timeoutMilliseconds: 200) { event in
                switch event {
                case .record(let record):
                    pending.remove(record.partition)
                    if let value = record.value, let size = windowSize(ofRecord: value) { sizes.insert(size) }
                case .partitionEOF(let tp, _): pending.remove(tp.partition)
                case .error: break
                }
            }
        }
        return sizes
    }

    /// windowEnd − windowStart of an aggregate record's value, nil for anything else.
    static func windowSize(ofRecord value: UnsafeRawBufferPointer) -> Int64? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
            let start = (object["windowStart"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }),
            let end = (object["windowEnd"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }), end > start
        else { return nil }
        return end - start
    }

    /// Refuses a run whose output topic (of `partitions` partitions; nil: not there yet)
    /// already holds windows of another size than `window`.
    static func checkOutput(
        topic: String, partitions: Int?, window: Int64, consumerConfig: KafkaConfig, logger: Logger
    ) throws {
        guard let partitions else { return }
        let found = try sizesInTail(of: topic, partitions: partitions, consumerConfig: consumerConfig, logger: logger)
        guard let other = found.filter({ $0 != window }).min() else { return }
        throw PipelineError.settingChanged(
            "the output topic \(topic) holds windows of \(text(other)) (its latest records say so), and this run writes windows of --window \(text(window)). An output key <deliveryId>@<windowStart> names another window under each size, so records of both sizes would overwrite each other. Write to a new --output-topic, or go back to --window \(text(other))")
    }
}
