import RecordFormats
import Runner
import Foundation
import Kafka
import Logging
import TrackingDomain

/// The window size is the one setting that changes what an output key means: under 1-minute
/// windows `d1@10:00:00Z` counts a minute, under 5-minute windows five. Records of two sizes in
/// one output topic overwrite each other. A group is fixed to its size (`GroupIdentity`); an
/// output topic is checked here, by `run` and `replay` alike, before anything is written: each
/// partition's newest aggregate record says which size the topic holds. The other settings
/// (grace, retention, idle timeout, commit interval, shards) only change when records appear,
/// and may change between runs (docs/windowing.md, "What a group and an output topic are fixed
/// to").
enum WindowSizeCheck {
    /// `1m`, `5m`, `30s`, `1h`, `1500ms`: as `--window` takes it.
    static func text(_ millis: Int64) -> String {
        if millis % 3_600_000 == 0 { return "\(millis / 3_600_000)h" }
        if millis % 60_000 == 0 { return "\(millis / 60_000)m" }
        if millis % 1_000 == 0 { return "\(millis / 1_000)s" }
        return "\(millis)ms"
    }

    /// windowEnd − windowStart of an aggregate record's value, nil for anything else.
    static func windowSize(ofRecord value: UnsafeRawBufferPointer) -> Int64? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
            let start = (object["windowStart"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }),
            let end = (object["windowEnd"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }), end > start
        else { return nil }
        return end - start
    }

    /// Refuses a run whose output topic (of `partitions` partitions; nil: not there yet) holds
    /// windows of another size than `window` (given as `given`): one partition whose newest
    /// aggregate record is of another size is enough. A partition whose newest
    /// `NewestRecords.bound` offsets hold no aggregate record, with older records behind them,
    /// cannot be told: refused too, unless `allowUnchecked` (`--allow-unchecked-output`), since
    /// a tombstone or another program's record at the end of every partition would otherwise
    /// let any size through.
    static func checkOutput(
        topic: String, partitions: Int?, window: Int64, given: GivenSetting, allowUnchecked: Bool, consumerConfig: KafkaConfig,
        clients: any KafkaClientFactory, logger: Logger
    ) throws {
        guard let partitions else { return }
        let found = try NewestRecords.find(in: topic, partitions: partitions, consumerConfig: consumerConfig, clients: clients, logger: logger) {
            $0.value.flatMap(windowSize(ofRecord:))
        }
        var others: [(partition: Int32, size: Int64)] = []
        var undecided: [(partition: Int32, skipped: NewestRecords.Skipped)] = []
        for (partition, result) in found {
            switch result {
            case .recognised(let size, _) where size != window: others.append((partition, size))
            case .undecided(let skipped): undecided.append((partition, skipped))
            case .recognised, .absent: break
            }
        }
        if let other = others.min(by: { $0.partition < $1.partition }) {
            throw PipelineError.settingChanged(
                "the output topic \(topic) holds windows of \(text(other.size)) (the newest aggregate record of \(topic)[\(other.partition)] says so), and this run writes windows of \(given.label). An output key <deliveryId>@<windowStart> names another window under each size, so records of both sizes would overwrite each other. Write to a new --output-topic, or go back to \(given.label(for: text(other.size)))")
        }
        guard !undecided.isEmpty else { return }
        undecided.sort { $0.partition < $1.partition }
        let tombstones = undecided.reduce(0) { $0 + $1.skipped.tombstones }
        let otherRecords = undecided.reduce(0) { $0 + $1.skipped.others }
        let places = undecided.map { "\(topic)[\($0.partition)]" }.joined(separator: ", ")
        let what =
            "the newest \(NewestRecords.bound) offsets of \(places) hold no aggregate record (\(tombstones) tombstones, \(otherRecords) other records), and older records there may be windows of another size than this run's \(given.label)"
        if allowUnchecked {
            logger.warning("writing into the output topic \(topic) unchecked (--allow-unchecked-output): \(what)")
            return
        }
        throw PipelineError.settingChanged(
            "the output topic \(topic) cannot be checked for windows of another size: \(what). An output key <deliveryId>@<windowStart> names another window under each size, so records of two sizes would overwrite each other. Write to a new --output-topic, or, if \(topic) holds no windows of another size, pass --allow-unchecked-output (TRACKPIPE_ALLOW_UNCHECKED_OUTPUT=true) to write into it unchecked")
    }
}
