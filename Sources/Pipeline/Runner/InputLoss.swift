import Kafka
import Logging

/// Offsets of a stage's input that no owner of its group will ever read: the partition's log
/// start passed them first (retention, or a broker's size limit, deleted them).
public struct LostInput: Sendable, Equatable {
    public var partition: TopicPartition
    /// The first offset lost; nil when the stage knows only that the group's records before
    /// `to` are gone (a window task that read its partition from the log start found the
    /// beginning of a source's records deleted: `FirstRead`).
    public var from: Int64?
    /// The offset after the last one lost.
    public var to: Int64

    public init(partition: TopicPartition, from: Int64?, to: Int64) {
        self.partition = partition
        self.from = from
        self.to = to
    }

    /// How many offsets: those from `from`, or every offset before `to`.
    public var count: Int64 { to - (from ?? 0) }

    /// The metadata field of the error line a runner logs for lost input (`topic[partition]`
    /// and the offsets), for log pipelines to pick those lines out.
    public static let logField = "lost_input"
}

/// The rule that tells lost input from offsets that were never records: a position not yet read
/// is lost when the log start has passed it. Offsets a consumer is never handed although the
/// log still holds them (a transactional producer's commit markers, aborted records, records
/// the log cleaner of a compacted topic removed) are not loss; they stay above the log start.
enum InputLoss {
    /// The part of the offsets `from..<to` that no consumer delivered (with `from` nil: every
    /// offset before `to`) which lies below the log start: nil when none does.
    static func lost(from: Int64?, to: Int64, logStart: Int64) -> (from: Int64?, to: Int64)? {
        let end = min(to, logStart)
        guard let from else { return end > 0 ? (nil, end) : nil }
        return end > from ? (from, end) : nil
    }
}

/// Offsets of a partition a runner knows were never read by its group: a jump in what the
/// consumer delivered, the end of a bounded run reached past offsets never delivered, or what
/// the stage found where it began reading (`UnreadInput`). `InputLoss` judges them.
struct UnreadSpan: Sendable, Equatable {
    var partition: TopicPartition
    var from: Int64?
    var to: Int64
    var reason: String
}

/// Judges what a runner never read against its partitions' log starts, and says what is lost:
/// an error in the log, `trackpipe_lost_offsets_total`, and the run's summary (a bounded run
/// exits 65 on it). A log start is the one librdkafka last saw in a fetch response (kept
/// current by every fetch, and the fetch that brought the records after a jump brought it
/// too), or asked of the cluster when none is known yet; a span whose log start cannot be read
/// waits for the next turn, and at the end of a run counts as lost.
struct LossWatch {
    let stageName: String
    let topic: String
    let logger: Logger
    let metrics: StageMetrics?
    /// What was found lost, in the order found.
    private(set) var lost: [LostInput] = []
    private var pending: [UnreadSpan] = []
    /// Offsets never delivered that were not lost, since the last notice.
    private var notLost = (spans: 0, offsets: Int64(0))
    private var lastNotice: Int64 = .min / 2

    init(stageName: String, topic: String, logger: Logger, metrics: StageMetrics?) {
        self.stageName = stageName
        self.topic = topic
        self.logger = logger
        self.metrics = metrics
        metrics?.lost(0, topic: topic)
    }

    /// Offsets the runner knows were deleted before it read them (a commit the log start has
    /// passed, found at the assignment).
    mutating func found(_ lost: LostInput, reason: String) {
        record(lost, reason: reason)
    }

    /// Judges `spans` now if their log starts are known, and what waited.
    mutating func judge(_ spans: [UnreadSpan], consumer: (any ConsumerClient)?, now: Int64, final: Bool = false) {
        pending += spans
        defer { noticeGaps(now: now, final: final) }
        guard !pending.isEmpty else { return }
        var waiting: [UnreadSpan] = []
        for span in pending {
            guard let logStart = consumer.flatMap({ Self.logStart(of: span.partition, consumer: $0) }) else {
                if final {
                    logger.warning(
                        "\(stageName): cannot read where \(span.partition) begins now, to tell whether offsets \(Self.describe(span.from, span.to)) were deleted or were never records; counting them as lost")
                    record(LostInput(partition: span.partition, from: span.from, to: span.to), reason: span.reason)
                } else {
                    waiting.append(span)
                }
                continue
            }
            if let part = InputLoss.lost(from: span.from, to: span.to, logStart: logStart) {
                record(LostInput(partition: span.partition, from: part.from, to: part.to), reason: span.reason)
            }
            // What the log start has not passed was never a record to deliver.
            let kept = max(span.from ?? 0, min(span.to, logStart))
            if span.from != nil, span.to > kept {
                notLost.spans += 1
                notLost.offsets += span.to - kept
                logger.debug(
                    "\(stageName): offsets \(Self.describe(kept, span.to)) of \(span.partition) were never delivered, though the partition begins at \(logStart): transaction markers, aborted records or records compaction removed, not lost input")
            }
        }
        pending = waiting
    }

    /// Offsets never delivered that were not lost, said at most once a minute (a transactional
    /// input makes a jump per transaction).
    private mutating func noticeGaps(now: Int64, final: Bool) {
        guard notLost.spans > 0, now - lastNotice >= 60_000 || final else { return }
        logger.notice(
            "\(stageName): \(notLost.offsets) offsets of \(topic) in \(notLost.spans) gaps were never delivered though the log still holds them: transaction markers, aborted records or records compaction removed; nothing is lost")
        notLost = (0, 0)
        lastNotice = now
    }

    private mutating func record(_ found: LostInput, reason: String) {
        // A partition taken again with the same commit behind the log start (a rebalance before
        // it read anything) finds the same loss again: it is one loss.
        let known = lost.contains { earlier in
            earlier.partition == found.partition && (earlier.from ?? .min) <= (found.from ?? .min) && earlier.to >= found.to
        }
        guard !known else { return }
        lost.append(found)
        metrics?.lost(found.count, topic: found.partition.topic)
        // The field lets a log pipeline (and the simulator's checks) pick these lines out.
        logger.error(
            "\(stageName): \(found.partition) offsets \(Self.describe(found.from, found.to)) were deleted (retention, or the broker's size limit) before this group read them (\(reason)): the hits in them are not counted. \(Self.remedy)",
            metadata: [LostInput.logField: "\(found.partition) \(Self.describe(found.from, found.to))"])
    }

    /// Where a partition's log begins, as librdkafka last saw it in a fetch response, or as the
    /// cluster answers; nil when neither says.
    static func logStart(of partition: TopicPartition, consumer: any ConsumerClient) -> Int64? {
        if let cached = consumer.cachedWatermarks(partition), cached.low >= 0 { return cached.low }
        guard let asked = try? consumer.beginningOffsets([partition]).first?.offset, asked >= 0 else { return nil }
        return asked
    }

    static func describe(_ from: Int64?, _ to: Int64) -> String {
        guard let from else { return "before \(to)" }
        return to - from == 1 ? "\(from)" : "\(from) to \(to - 1)"
    }

    /// What a user can do about lost input, in a live worker's log: the records are gone from
    /// Kafka, so reading the same partition again finds nothing.
    static let remedy =
        "Recount them from wherever the hits are still kept (an archive, the collectors or the source system; for the repartition topic, the input topic while it still holds them), or accept the loss"
}
