import Kafka
import Logging

/// Offsets of a partition of a stage's input that its group did not read, and how that was
/// found: the one type from where a span is found (the runner's admission guard, its
/// assignment, a window task's first read) through the judge (`InputLoss`) to the summary, the
/// metric and a bounded run's exit code. Offsets the log still holds were never records
/// (transaction markers, aborted records, what compaction removed); what lies below the log
/// start was deleted before the group read it: lost.
public struct InputSpan: Sendable, Equatable {
    public var partition: TopicPartition
    /// The first offset; nil when only `to` is known: every record of the group's before it.
    public var from: Int64?
    /// The offset after the last one.
    public var to: Int64
    public var cause: Cause

    /// How the span was found.
    public enum Cause: Sendable, Equatable {
        /// The consumer delivered `to` where the next offset was `from`.
        case jump
        /// The group had committed nothing, and the partition began at `from` when it was
        /// assigned: a new group begins where its input began then, and the consumer's first
        /// delivery was `to`.
        case groupStart
        /// A bounded run's end, `to`, was reached with the offsets from `from` never delivered.
        case endReached
        /// The group's commit, `from`, lay before the partition's log start, `to`, at assignment.
        case commitBehindLogStart
        /// A window task found, where it began reading without a commit, that records of its
        /// group's were never read (`FirstRead`), in its words.
        case firstRead(String)
    }

    public init(partition: TopicPartition, from: Int64?, to: Int64, cause: Cause) {
        self.partition = partition
        self.from = from
        self.to = to
        self.cause = cause
    }

    /// How many offsets: those from `from`, or every offset before `to`.
    public var count: Int64 { to - (from ?? 0) }

    /// The offsets, as the log and the summary name them.
    var offsets: String {
        guard let from else { return "before \(to)" }
        return to - from == 1 ? "\(from)" : "\(from) to \(to - 1)"
    }

    /// How it was found, in the words of the error line.
    var reason: String {
        switch cause {
        case .jump: "the consumer was handed offset \(to) where the next offset to read was \(from ?? 0)"
        case .groupStart:
            "the group had committed nothing and the partition began at offset \(from ?? 0) when it was assigned, but the first offset the consumer was handed is \(to)"
        case .endReached: "the run's end at offset \(to) was reached with the offsets from \(from ?? 0) never delivered"
        case .commitBehindLogStart: "the group's commit at offset \(from ?? 0) lies before the partition's log start \(to)"
        case .firstRead(let why): why
        }
    }

    /// The metadata field of the error line a runner logs for lost input (`topic[partition]`
    /// and the offsets), for log pipelines to pick those lines out.
    public static let logField = "lost_input"
}

/// The rule that tells lost input from offsets that were never records: a position not yet read
/// is lost when the log start has passed it. Offsets a consumer is never handed although the
/// log still holds them (a transactional producer's commit markers, aborted records, records
/// the log cleaner of a compacted topic removed) are not loss; they stay above the log start.
enum InputLoss {
    /// The part of `span` below the log start: what was deleted before the group read it; nil
    /// when none is.
    static func lost(_ span: InputSpan, logStart: Int64) -> InputSpan? {
        let end = min(span.to, logStart)
        guard let from = span.from else { return end > 0 ? InputSpan(partition: span.partition, from: nil, to: end, cause: span.cause) : nil }
        return end > from ? InputSpan(partition: span.partition, from: from, to: end, cause: span.cause) : nil
    }

    /// Where reading a partition taken at assignment begins, and what of it is lost already: a
    /// group reads on from its commit, or from the log start where that has passed the commit
    /// (what lay between is lost); a group that committed nothing begins at the log start as it
    /// was at assignment, so that records deleted below it before the first fetch are found
    /// lost at the first delivery (`.groupStart`), not silently skipped.
    static func start(of partition: TopicPartition, committed: Int64?, logStart: Int64?) -> (readFrom: Int64?, lost: InputSpan?) {
        guard let committed else { return (logStart, nil) }
        guard let logStart, logStart > committed else { return (committed, nil) }
        return (logStart, InputSpan(partition: partition, from: committed, to: logStart, cause: .commitBehindLogStart))
    }
}

/// Judges what a runner never read against its partitions' log starts, and says what is lost:
/// an error in the log, `trackpipe_lost_offsets_total`, and the run's summary (a bounded run
/// exits 65 on it). A log start is the one librdkafka last saw in a fetch response (kept
/// current by every fetch, and the fetch that brought the records after a jump brought it
/// too), or asked of the cluster when none is known yet; a span whose log start cannot be read
/// waits for the next turn, and at the end of a run counts as lost.
struct LossWatch: RunnerPart {
    let context: RunnerContext
    /// What was found lost, in the order found.
    private(set) var lost: [InputSpan] = []
    private var pending: [InputSpan] = []
    /// Offsets never delivered that were not lost, since the last notice.
    private var notLost = (spans: 0, offsets: Int64(0))
    private var lastNotice: Int64 = .min / 2

    init(_ context: RunnerContext) {
        self.context = context
        metrics?.lost(0, topic: topic)
    }

    /// Judges `spans` now if their log starts are known, and what waited.
    mutating func judge(_ spans: [InputSpan], consumer: (any ConsumerClient)?, now: Int64, final: Bool = false) {
        pending += spans
        defer { noticeGaps(now: now, final: final) }
        guard !pending.isEmpty else { return }
        var waiting: [InputSpan] = []
        for span in pending {
            guard let logStart = consumer.flatMap({ Self.logStart(of: span.partition, consumer: $0) }) else {
                if final {
                    logger.warning(
                        "\(stageName): cannot read where \(span.partition) begins now, to tell whether offsets \(span.offsets) were deleted or were never records; counting them as lost")
                    found(span, logStart: nil)
                } else {
                    waiting.append(span)
                }
                continue
            }
            if let part = InputLoss.lost(span, logStart: logStart) { found(part, logStart: logStart) }
            // What the log start has not passed was never a record to deliver.
            let kept = max(span.from ?? 0, min(span.to, logStart))
            if span.from != nil, span.to > kept {
                notLost.spans += 1
                notLost.offsets += span.to - kept
                logger.debug(
                    "\(stageName): offsets \(InputSpan(partition: span.partition, from: kept, to: span.to, cause: span.cause).offsets) of \(span.partition) were never delivered, though the partition begins at \(logStart): transaction markers, aborted records or records compaction removed, not lost input")
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

    /// Offsets known to have been deleted before they were read: judged here, or by the runner
    /// (a commit the log start has passed, found at the assignment).
    mutating func found(_ span: InputSpan, logStart: Int64?) {
        for found in Self.unreported(span, in: lost) { report(found, logStart: logStart) }
    }

    /// The parts of `span` no earlier report covers: a lost offset is reported once, however
    /// many ways find it (a partition taken again with the same commit behind the log start; a
    /// new group's first delivery past its start and the window task's first read, which see
    /// the same deleted records). A span without `from` covers every offset before its `to`.
    static func unreported(_ span: InputSpan, in reported: [InputSpan]) -> [InputSpan] {
        let covered = reported.filter { $0.partition == span.partition }.map { ($0.from ?? 0)..<$0.to }.sorted { $0.lowerBound < $1.lowerBound }
        var parts: [InputSpan] = []
        var next = span.from ?? 0
        for range in covered where range.upperBound > next && range.lowerBound < span.to {
            if range.lowerBound > next { parts.append(InputSpan(partition: span.partition, from: next, to: range.lowerBound, cause: span.cause)) }
            next = max(next, range.upperBound)
        }
        if next < span.to { parts.append(InputSpan(partition: span.partition, from: next, to: span.to, cause: span.cause)) }
        // A span of every offset before its end that nothing covered is kept as it was found.
        if span.from == nil, parts.count == 1, parts[0].from == 0, parts[0].to == span.to { parts[0].from = nil }
        return parts
    }

    private mutating func report(_ found: InputSpan, logStart: Int64?) {
        lost.append(found)
        metrics?.lost(found.count, topic: found.partition.topic)
        let where_ = logStart.map { "; the partition now begins at offset \($0)" } ?? ""
        // The field lets a log pipeline (and the simulator's checks) pick these lines out.
        logger.error(
            "\(stageName): \(found.partition) offsets \(found.offsets) were deleted (retention, or the broker's size limit) before this group read them (\(found.reason)\(where_)): the hits in them are not counted. \(Self.remedy)",
            metadata: [InputSpan.logField: "\(found.partition) \(found.offsets)"])
    }

    /// Where a partition's log begins, as librdkafka last saw it in a fetch response, or as the
    /// cluster answers; nil when neither says.
    static func logStart(of partition: TopicPartition, consumer: any ConsumerClient) -> Int64? {
        if let cached = consumer.cachedWatermarks(partition), cached.low >= 0 { return cached.low }
        guard let asked = try? consumer.beginningOffsets([partition]).first?.offset, asked >= 0 else { return nil }
        return asked
    }

    /// What a user can do about lost input, in a live worker's log: the records are gone from
    /// Kafka, so reading the same partition again finds nothing.
    static let remedy =
        "Recount them from wherever the hits are still kept (an archive, the collectors or the source system; for the repartition topic, the input topic while it still holds them), or accept the loss"
}
