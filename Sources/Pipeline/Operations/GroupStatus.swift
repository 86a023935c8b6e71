import RecordFormats
import Runner
import Kafka
import Logging
import TrackingDomain
import Windowing

/// Where a trackpipe worker's consumer groups stand, read from Kafka without joining them:
/// per partition the committed offset, the end offset, the lag between them, and the
/// checkpoint the aggregate stage stored in the commit's metadata, decoded. What
/// `trackpipe status` prints.
///
/// Reading commits (OffsetFetch) and end offsets never joins a group, so a live worker is not
/// disturbed: no rebalance, no commit.
public struct WorkerStatus: Sendable, Encodable {
    /// When the offsets were read (RFC 3339).
    public var readAt: String
    public var brokers: String
    /// The normalize group on the input topic, then the aggregate group on the repartition
    /// topic; one group for a worker run with `--input-keyed-by-delivery`.
    public var groups: [GroupStatus]
}

/// One consumer group on the one topic it reads.
public struct GroupStatus: Sendable, Encodable {
    public var group: String
    /// `normalize` or `aggregate`, as in the metrics' `stage` label.
    public var stage: String
    public var topic: String
    /// The window sizes the group counts (`1m`, as the metrics' `window` label names them), as
    /// its commits record them (`window=60000,3600000`); nil where no commit says (Kafka holds
    /// no figure of the windows themselves: those are the metrics').
    public var windows: [String]?
    public var partitions: [PartitionStatus]

    /// Messages behind, over the partitions: what Kafka's own lag tools show for the group.
    public var lag: Int64 { partitions.reduce(0) { $0 + $1.lag } }
}

/// One partition of a group's topic.
public struct PartitionStatus: Sendable, Encodable {
    public var partition: Int32
    /// The next offset the group will read; nil where the group never committed.
    public var committed: Int64?
    /// The next offset to be written (the high watermark).
    public var end: Int64
    /// Messages from the committed offset to the end; from the first stored offset where
    /// nothing was committed (a new member starts there: `auto.offset.reset=earliest`).
    public var lag: Int64
    /// The commit's metadata decoded, where it is a window stage's checkpoint.
    public var checkpoint: CheckpointStatus?
    /// The commit's metadata decoded, where the normalize stage made it.
    public var source: SourceCheckpointStatus?
    /// The commit's metadata as stored, where it is something else than a checkpoint this
    /// version reads (another program's, or another version of trackpipe's); nil when empty.
    public var foreignMetadata: String?
}

/// A decoded `Checkpoint`, with its times as RFC 3339 and what follows from it.
///
/// A new field of `Checkpoint` becomes one more property here (set in `init`, named in
/// `CodingKeys`, without which the JSON output leaves it out), and one more column in
/// `trackpipe status`'s table (`StatusCommand.checkpointColumns`).
public struct CheckpointStatus: Sendable, Encodable {
    /// The encoding's tag, `trackpipe/5` (`Checkpoint.format`).
    public var format: String
    /// Every window that ended (plus retention) before this had been evicted: later hits for
    /// them are recognised as already final. It is the stage's watermark at the commit; nil
    /// before the first watermark (nothing evicted yet).
    public var evictedBefore: String?
    public var evictedBeforeMillis: Int64
    /// The processed mark: the next offset the committing owner had not processed, the
    /// committed offset itself.
    public var processedMark: Int64
    /// Messages after the processed mark, as of the commit: the real backlog of the
    /// aggregate stage.
    public var unprocessed: Int64
    /// Source partitions with a duplicate floor (the highest source offset counted): events
    /// at or below it, sent again by a crashed normalize stage, are dropped.
    public var duplicateFloors: Int
    /// Where the task's state topic partition had been written when it committed.
    public var changelog: Int64
    /// How many incarnations of the input the floors belong to (more than one after the input
    /// topic was switched or recreated under the group, until the old floors are replaced).
    public var inputIncarnations: Int

    init(_ checkpoint: Checkpoint, format: String, end: Int64) {
        self.format = format
        evictedBeforeMillis = checkpoint.evictedBefore
        evictedBefore =
            checkpoint.evictedBefore < RFC3339.minEpochMillis ? nil : RFC3339.format(epochMillis: checkpoint.evictedBefore)
        processedMark = checkpoint.processedMark
        unprocessed = max(0, end - checkpoint.processedMark)
        duplicateFloors = checkpoint.seen.count
        inputIncarnations = Set(checkpoint.seen.values.map(\.incarnation)).count
        changelog = checkpoint.changelog
    }
}

/// A decoded `SourceCheckpoint`: what the normalize stage committed with an input partition.
public struct SourceCheckpointStatus: Sendable, Encodable {
    /// Which incarnation of the partition the offsets belong to: it grows each time the topic
    /// was found deleted and created again.
    public var epoch: UInt32
    /// The partition's event time as of the commit (RFC 3339); nil before its first hit.
    public var progress: String?

    init(_ checkpoint: SourceCheckpoint) {
        epoch = checkpoint.epoch
        progress = checkpoint.progress.flatMap { $0 < RFC3339.minEpochMillis ? nil : RFC3339.format(epochMillis: $0) }
    }
}

/// Why a status cannot be shown, with what to check.
public enum StatusError: Error, CustomStringConvertible, Equatable {
    case topicMissing(topic: String, brokers: String)
    case unknownGroup(group: String, topics: [String])
    case notTrackpipe(group: String, detail: String)
    case kafka(String)

    public var description: String {
        switch self {
        case .topicMissing(let topic, let brokers):
            "the topic \(topic) does not exist on \(brokers): check --input-topic (and --brokers); it is the topic the worker reads"
        case .unknownGroup(let group, let topics):
            "no committed offsets for the group \(group) on \(topics.joined(separator: " or ")): the worker never ran (or has not committed yet: it commits every --commit-interval, 5 s by default), the name is wrong (--group, and --input-topic or --repartition-topic if the worker uses others), or its offsets expired (the brokers' offsets.retention.minutes, 7 days by default, after the group had no member)"
        case .notTrackpipe(let group, let detail):
            "the group \(group) is not a trackpipe worker's: \(detail). Another consumer (kcat -G, a Kafka tool) may use this name; or a trackpipe worker has just started and its aggregate stage has not committed yet (it commits every --commit-interval): try again in a few seconds"
        case .kafka(let text):
            text
        }
    }
}

extension WorkerStatus {
    /// Reads the groups of the worker configured like `config` (brokers, group, topics, `-X`).
    /// - Parameter now: wall-clock epoch ms, for `readAt`.
    public static func read(config: PipelineConfig, logger: Logger, now: Int64 = wallClockMillis()) throws -> WorkerStatus {
        let admin: TopicAdmin
        do {
            admin = try TopicAdmin(config: config.adminConfig, logger: logger.with(label: "trackpipe.kafka.admin"))
        } catch {
            throw StatusError.kafka("cannot make a Kafka client for \(config.brokers): \(error)")
        }
        func partitions(of topic: String) throws -> Int? {
            do {
                return try admin.partitionCount(of: topic)
            } catch {
                throw StatusError.kafka(
                    "cannot read the metadata of \(topic) from \(config.brokers): \(error). Check --brokers (and -X security settings): no broker answered, or it refused this client")
            }
        }
        guard let inputPartitions = try partitions(of: config.inputTopic) else {
            throw StatusError.topicMissing(topic: config.inputTopic, brokers: config.brokers)
        }
        let repartitionTopic = config.effectiveRepartitionTopic
        let repartitionPartitions = try partitions(of: repartitionTopic)

        // One consumer that never subscribes asks each group's coordinator for its commits
        // (`committed(by:)`), and never joins: a client of each group's id would cost a
        // connection to every broker more.
        var groups = try TopicReader.using(groupOf: config, logger: logger) { reader in
            var groups = [try readGroup(config.group, stage: "normalize", topic: config.inputTopic, partitions: inputPartitions, config: config, reader: reader)]
            if let repartitionPartitions {
                groups.append(
                    try readGroup(
                        config.aggregateGroup, stage: "aggregate", topic: repartitionTopic, partitions: repartitionPartitions, config: config,
                        reader: reader))
            }
            return groups
        }
        var input = groups[0]
        let committedAnywhere = groups.contains { $0.partitions.contains { $0.committed != nil } }
        guard committedAnywhere else {
            throw StatusError.unknownGroup(
                group: config.group,
                topics: ["\(config.inputTopic) (group \(config.group))"]
                    + (repartitionPartitions == nil ? [] : ["\(repartitionTopic) (group \(config.aggregateGroup))"]))
        }
        // A worker run with --input-keyed-by-delivery has one stage, aggregate, in <group> on
        // the input topic: its commits carry the checkpoints.
        if input.partitions.contains(where: { $0.checkpoint != nil }) {
            input.stage = "aggregate"
            groups = [input]
        }
        guard groups.contains(where: { $0.partitions.contains { $0.checkpoint != nil || $0.source != nil } }) else {
            throw StatusError.notTrackpipe(group: config.group, detail: notTrackpipeDetail(groups, config: config, repartitionExists: repartitionPartitions != nil))
        }
        return WorkerStatus(readAt: RFC3339.format(epochMillis: now), brokers: config.brokers, groups: groups)
    }

    /// What was found instead of a trackpipe worker's commits.
    private static func notTrackpipeDetail(_ groups: [GroupStatus], config: PipelineConfig, repartitionExists: Bool) -> String {
        var parts: [String] = []
        for group in groups {
            let committed = group.partitions.filter { $0.committed != nil }
            let foreign = committed.compactMap(\.foreignMetadata)
            if committed.isEmpty {
                parts.append("\(group.group) has committed nothing on \(group.topic)")
            } else if let tag = foreign.lazy.compactMap({ Checkpoint.otherVersion(of: $0) ?? SourceCheckpoint.otherVersion(of: $0) }).first {
                parts.append(
                    "\(group.group) has committed \(committed.count) partitions of \(group.topic) with checkpoints of another version of trackpipe (\(tag)), which this one does not read (it reads \(Checkpoint.format) and \(SourceCheckpoint.format))")
            } else if let sample = foreign.first {
                parts.append(
                    "\(group.group) has committed \(committed.count) partitions of \(group.topic) with metadata that is not a trackpipe checkpoint (\"\(sample.prefix(60))\")")
            } else {
                parts.append("\(group.group) has committed \(committed.count) partitions of \(group.topic) without a trackpipe checkpoint")
            }
        }
        if !repartitionExists {
            parts.append("the repartition topic \(config.effectiveRepartitionTopic) does not exist")
        }
        return parts.joined(separator: "; ")
    }

    private static func readGroup(
        _ group: String, stage: String, topic: String, partitions count: Int, config: PipelineConfig, reader: TopicReader
    ) throws -> GroupStatus {
        let partitions = (0..<Int32(count)).map { TopicPartition(topic: topic, partition: $0) }
        do {
            // Made at the first group's question: a client that cannot be made is that read's failure.
            let reader = try reader.consumer()
            let committed = Dictionary(uniqueKeysWithValues: try reader.committed(by: group, partitions).map { ($0.partition, $0) })
            let ends = Dictionary(uniqueKeysWithValues: try reader.endOffsets(partitions).map { ($0.partition, $0.offset) })
            let starts = Dictionary(uniqueKeysWithValues: try reader.beginningOffsets(partitions).map { ($0.partition, $0.offset) })
            var sizes: [Int64]?
            let rows = partitions.map { tp in
                let end = max(0, ends[tp.partition] ?? 0)
                let commit = committed[tp.partition]
                let offset = commit.flatMap { $0.offset >= 0 ? $0.offset : nil }
                let metadata = commit?.metadata.flatMap { $0.isEmpty ? nil : $0 }
                let decoded = Checkpoint(decoding: metadata, group: config.group)
                let checkpoint = decoded.map { CheckpointStatus($0, format: String(metadata?.prefix { $0 != " " } ?? ""), end: end) }
                let sourceCheckpoint = SourceCheckpoint(decoding: metadata, group: config.group)
                sizes = sizes ?? (decoded?.identity ?? sourceCheckpoint?.identity)?.windowSizes
                return PartitionStatus(
                    partition: tp.partition, committed: offset, end: end,
                    lag: max(0, end - (offset ?? max(0, starts[tp.partition] ?? 0))), checkpoint: checkpoint,
                    source: sourceCheckpoint.map(SourceCheckpointStatus.init), foreignMetadata: checkpoint == nil && sourceCheckpoint == nil ? metadata : nil)
            }
            return GroupStatus(group: group, stage: stage, topic: topic, windows: sizes?.map(WindowSize.text), partitions: rows)
        } catch let error as StatusError {
            throw error
        } catch {
            throw StatusError.kafka(
                "cannot read the offsets of the group \(group) on \(topic) from \(config.brokers): \(error). Check --brokers (and -X security settings)")
        }
    }
}
