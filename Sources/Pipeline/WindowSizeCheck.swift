import RecordFormats
import Runner
import Foundation
import Kafka
import Logging
import TrackingDomain
import Windowing

/// The window size is the one setting that changes what an output key means: under 1-minute
/// windows `d1@10:00:00Z` counts a minute, under 5-minute windows five. Records of two sizes in
/// one output topic overwrite each other. A group is fixed to its size (`GroupIdentity`); an
/// output topic is checked here, by `run` and `replay` alike: before anything is written, each
/// partition's newest aggregate record says which size the topic holds; once the run's first
/// records are written, what others wrote since says whether another size raced it there. The other settings
/// (grace, retention, idle timeout, commit interval, shards) only change when records appear,
/// and may change between runs (docs/windowing.md, "What a group and an output topic are fixed
/// to").
package enum WindowSizeCheck {
    /// What is wrong with `topics` as the output topics of windows of `sizes` (in the same order):
    /// each size needs a topic of its own. Nil when they fit. The one rule `run` and `replay`
    /// judge their output topics by, on the command line and in a config alike.
    package static func outputTopicsProblem(_ topics: [String], sizes: [Int64]) -> String? {
        guard topics.count != sizes.count || Set(topics).count != topics.count else { return nil }
        let example = sizes.map { "tracking-aggregates-" + WindowSize.text($0) }.joined(separator: ",")
        return "name a topic of its own for each window size, in the order of --window (\(sizes.count) size\(sizes.count == 1 ? "" : "s")), like --output-topic \(example): in one topic a key <deliveryId>@<windowStart> would name windows of two sizes"
    }

    /// What a run writes into one output topic, as a refusal names it: the flag as given, and of
    /// several sizes the one that topic takes.
    private static func writes(_ window: Int64, _ given: GivenSetting, _ sizes: Int) -> String {
        sizes == 1 ? given.label : "\(WindowSize.text(window)) there (\(given.label))"
    }

    /// windowEnd − windowStart of an aggregate record's value, nil for anything else.
    static func windowSize(ofRecord value: UnsafeRawBufferPointer) -> Int64? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any],
            let start = (object["windowStart"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }),
            let end = (object["windowEnd"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }), end > start
        else { return nil }
        return end - start
    }

    /// `checkOutput` for each output topic and the size it takes; returned, the check of the
    /// run's first records in all of them.
    static func checkOutputs(
        _ outputs: [(topic: String, size: Int64)], given: GivenSetting, allowUnchecked: Bool, group: String? = nil, admin: TopicAdmin,
        reader: TopicReader, logger: Logger
    ) throws -> @Sendable ([String: AcknowledgedRecords]) throws -> Void {
        let checks = try outputs.map { output in
            (output.topic, try checkOutput(
                topic: output.topic, partitions: try Pipeline.existingPartitionCount(of: output.topic, admin: admin), window: output.size,
                given: given, sizes: outputs.count, allowUnchecked: allowUnchecked, group: group, admin: admin, reader: reader, logger: logger))
        }
        return { written in
            for (topic, check) in checks { try check(written[topic] ?? AcknowledgedRecords()) }
        }
    }

    /// Refuses a run whose output topic (of `partitions` partitions; nil: not there yet) holds
    /// windows of another size than `window` (given as `given`): one partition whose newest
    /// aggregate record is of another size is enough. A partition whose newest
    /// `NewestRecords.bound` offsets hold no aggregate record, with older records behind them,
    /// cannot be told: refused too, unless `allowUnchecked` (`--allow-unchecked-output`), since
    /// a tombstone or another program's record at the end of every partition would otherwise
    /// let any size through. Returns the check of the run's first records (`checkWritten`), for
    /// its runner (`RunnerSettings.checkFirstOutput`), which asks through a reader of its own
    /// (of `reader`'s settings); `group`: the run's, nil for a replay; `sizes`: how many the run
    /// counts, each into a topic of its own.
    static func checkOutput(
        topic: String, partitions: Int?, window: Int64, given: GivenSetting, sizes: Int = 1, allowUnchecked: Bool, group: String? = nil,
        admin: TopicAdmin, reader: TopicReader, logger: Logger
    ) throws -> @Sendable (AcknowledgedRecords) throws -> Void {
        let logs = try partitions.map { try NewestRecords.logs(of: topic, partitions: $0, reader: reader) } ?? [:]
        let (readerConfig, clients, readerLogger) = (reader.config, reader.clients, reader.logger)
        let afterwards: @Sendable (AcknowledgedRecords) throws -> Void = { written in
            try TopicReader.using(config: readerConfig, clients: clients, logger: readerLogger) { reader in
                try checkWritten(
                    topic: topic, since: logs.mapValues(\.upperBound), written: written, window: window, given: given, sizes: sizes, group: group,
                    admin: admin, reader: reader, logger: logger)
            }
        }
        guard let partitions else { return afterwards }
        let found = try NewestRecords.find(in: topic, partitions: partitions, logs: logs, reader: reader) {
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
                "the output topic \(topic) holds windows of \(WindowSize.text(other.size)) (the newest aggregate record of \(topic)[\(other.partition)] says so), and this run writes windows of \(writes(window, given, sizes)). An output key <deliveryId>@<windowStart> names another window under each size, so records of both sizes would overwrite each other. Write to a new --output-topic, or \(sizes == 1 ? "go back to \(given.label(for: WindowSize.text(other.size)))" : "give --output-topic each size's own topic, in the order of --window")")
        }
        guard !undecided.isEmpty else { return afterwards }
        undecided.sort { $0.partition < $1.partition }
        let tombstones = undecided.reduce(0) { $0 + $1.skipped.tombstones }
        let otherRecords = undecided.reduce(0) { $0 + $1.skipped.others }
        let places = undecided.map { "\(topic)[\($0.partition)]" }.joined(separator: ", ")
        let what =
            "the newest \(NewestRecords.bound) offsets of \(places) hold no aggregate record (\(tombstones) tombstones, \(otherRecords) other records), and older records there may be windows of another size than this run's \(writes(window, given, sizes))"
        if allowUnchecked {
            logger.warning("writing into the output topic \(topic) unchecked (--allow-unchecked-output): \(what)")
            return afterwards
        }
        throw PipelineError.settingChanged(
            "the output topic \(topic) cannot be checked for windows of another size: \(what). An output key <deliveryId>@<windowStart> names another window under each size, so records of two sizes would overwrite each other. Write to a new --output-topic, or, if \(topic) holds no windows of another size, pass --allow-unchecked-output (TRACKPIPE_ALLOW_UNCHECKED_OUTPUT=true) to write into it unchecked")
    }

    /// Two runs that start before either has written pass `checkOutput` both. Once the first
    /// records this run wrote (`written`) are acknowledged, and before it writes more, it reads
    /// what reached the topic since its start-up check (`since`: where each partition ended then):
    /// on a partition it wrote to, up to its first record there; on any other, to the end. An
    /// aggregate record of another size below its first came first; one on a partition it has not
    /// written to cannot be told to have come later: either stops this run. One after its first
    /// on the same partition is left to its writer, whose own check finds this run's below it. Of
    /// two such runs one at least stops, since the check of the one acknowledged last reads what
    /// the other wrote first (docs/windowing.md, "Two runs that start together").
    static func checkWritten(
        topic: String, since: [Int32: Int64], written: AcknowledgedRecords, window: Int64, given: GivenSetting, sizes: Int = 1, group: String?,
        admin: TopicAdmin, reader: TopicReader, logger: Logger
    ) throws {
        let partitions = try admin.partitionCount(of: topic) ?? 0
        var ranges: [Int32: Range<Int64>] = [:]
        for (partition, log) in try NewestRecords.logs(of: topic, partitions: partitions, reader: reader) {
            let from = max(log.lowerBound, since[partition] ?? 0), to = written.spans[partition]?.lowerBound ?? log.upperBound
            if from < to { ranges[partition] = from..<to }
        }
        let others = try NewestRecords.read(topic: topic, ranges: ranges, reader: reader) { record in
            record.value.flatMap(windowSize(ofRecord:)).flatMap { $0 == window ? nil : $0 }
        }.newest
        // Named first: a record below this run's own on its partition, then one where no order is known.
        let order = { (partition: Int32) in (written.spans[partition] == nil ? 1 : 0, partition) }
        guard let (partition, other) = others.min(by: { order($0.key) < order($1.key) }) else {
            logger.info("\(topic) holds no windows of another size written since this run started, up to its first \(written.count) records")
            return
        }
        let places = written.spans.sorted { $0.key < $1.key }.map { partition, span in
            "\(topic)[\(partition)] \(span.count == 1 ? "offset \(span.lowerBound)" : "offsets \(span.lowerBound) to \(span.upperBound - 1)")"
        }
        // A group keeps the windows it wrote as written: into a new topic it would not write them again.
        let remedy = group.map { "Run this pipeline again under a new --group (\($0) has counted and written these windows) with a new --output-topic" }
            ?? "Replay into a new --output-topic, or an --output-file"
        let before = written.spans[partition].map { "before this run's first record there, at \($0.lowerBound)" }
            ?? "in a partition this run has not written to, where which came first cannot be told"
        throw PipelineError.settingChanged(
            "another run writes windows of \(WindowSize.text(other.value)) into the output topic \(topic) (an aggregate record of that size at \(topic)[\(partition)] offset \(other.offset), written since this run started and \(before)), and this run writes windows of \(writes(window, given, sizes)). An output key <deliveryId>@<windowStart> names another window under each size, so records of both sizes would overwrite each other: this run stops, and leaves the topic to the other. Its first records stay in \(topic) (\(written.count) at \(places.joined(separator: ", "))): a reader tells them by their size, windowEnd - windowStart = \(WindowSize.text(window)). \(remedy) (docs/windowing.md, \"Two runs that start together\")")
    }
}
