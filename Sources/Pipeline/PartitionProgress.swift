import Kafka

/// What the runner knows of one assigned partition: where it is, where it must stop, what it
/// last committed. One struct per partition, keyed by topic and partition, instead of a
/// dictionary per field.
struct PartitionProgress: Sendable {
    /// The next offset expected; nil until known (no commit, first record not seen yet).
    var next: Int64?
    /// Where reading started, once known (for progress).
    var first: Int64?
    /// Where a bounded run stops (exclusive); nil while unbounded or not yet known.
    var end: Int64?
    /// Read up to `end`.
    var atEnd = false
    var lastCommitted: CommitPoint?

    /// Applies the consumer guard (against librdkafka 2.0.x's stale or skipped deliveries) to one
    /// record: what to do with it.
    enum Admission: Equatable {
        case take
        /// An offset at or below one already processed: a stale or repeated record.
        case stale
        /// Offsets jumped forward by this many (compaction, transactions, retention; or a
        /// consumer bug): taken, and reported.
        case gap(Int64)
    }

    mutating func admit(offset: Int64) -> Admission {
        defer { if offset >= (next ?? .min) { next = offset + 1 } }
        guard let expected = next else { return .take }
        if offset < expected { return .stale }
        if offset > expected { return .gap(offset - expected) }
        return .take
    }
}

/// Progress of every partition a runner owns.
typealias ProgressTable = [TopicPartition: PartitionProgress]
