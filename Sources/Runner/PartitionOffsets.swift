import RecordFormats
/// Where one partition stands, every offset named for what it means. A runner keeps one per
/// owned partition (what it has read and what it committed); a window task keeps one for its
/// partition (what it has processed, and what the previous owner left behind). All offsets are
/// Kafka's "next offset" convention: the first one not yet done.
///
/// | offset | meaning | kept by |
/// |---|---|---|
/// | `nextToRead` | the next offset the consumer should deliver; below it a record is stale, above it offsets were skipped | runner (admission guard) |
/// | `processedMark` | the processed mark: every offset below it has been handled (counted, dropped or dead-lettered) | task |
/// | `committed` | the offset stored in the group, where the next owner starts: the previous owner's at assignment, then this owner's last commit | runner and task |
/// | `metadata` | what was committed with it: what the committing owner had settled (a `Checkpoint` or `SourceCheckpoint`) | runner and task |
/// | `previousMark` | the previous owner's processed mark, from the task record of its changelog: below it a record is a reread, whose output that owner may not have sent | task |
package struct PartitionOffsets: Sendable, Equatable {
    var nextToRead: Int64?
    package var processedMark: Int64?
    package var committed: Int64?
    package var metadata: String?
    package var previousMark: Int64?

    package init(nextToRead: Int64? = nil, committed: Int64? = nil, metadata: String? = nil) {
        self.nextToRead = nextToRead
        self.committed = committed
        self.metadata = metadata
    }

    /// What to do with a record the consumer delivered (the guard against librdkafka 2.0.x's
    /// stale or skipped deliveries).
    enum Admission: Equatable {
        case take
        /// An offset below one already read: a stale or repeated record.
        case stale
        /// Offsets jumped forward by this many (compaction, transactions, retention; or a
        /// consumer bug): taken, and reported.
        case gap(Int64)
    }

    mutating func admit(offset: Int64) -> Admission {
        defer { if offset >= (nextToRead ?? .min) { nextToRead = offset + 1 } }
        guard let expected = nextToRead else { return .take }
        if offset < expected { return .stale }
        if offset > expected { return .gap(offset - expected) }
        return .take
    }

    /// Still below the previous owner's mark: the task rereads what that owner processed.
    package var isRereading: Bool {
        guard let previousMark else { return false }
        return (processedMark ?? committed ?? 0) < previousMark
    }
}
