import RecordFormats
import Runner
import Windowing

/// Where a partition's window task begins, worked out from its partition's start alone: a pure
/// function, so that every way a commit can look (none, beyond the log, another tool's, a
/// checkpoint) is tested without an engine, a changelog or Kafka.
///
/// Without a checkpoint the task counts from where the consumer starts; with one, its windows
/// are read back from the changelog up to the position the checkpoint recorded, and the task
/// record there says how far they had counted.
struct TaskStart: Sendable, Equatable {
    /// The commit the task resumes from: nil when there is none, or when it lies beyond the log
    /// and its offsets mean nothing in the log there is now.
    var committed: Int64?
    /// The commit's metadata, kept only when it is a checkpoint: the runner skips a commit
    /// that would repeat it.
    var metadata: String?
    /// Which line of owners' changelog a task with one reads back.
    var lineage: TaskChangelog.Lineage
    /// For a checkpoint beyond the log: the eviction horizon it had reached, which holds,
    /// though none of its offsets does.
    var horizonBeyondTheLog: Int64?
    /// The duplicate filter's floors, as checkpointed.
    var floors: [Int32: SourceFloor]?
    /// The changelog position the commit recorded: the windows are in the changelog, which must
    /// reach it.
    var committedChangelog: Int64?

    init(_ start: PartitionStart, checkpoint: Checkpoint?) {
        lineage = Self.lineage(start, checkpoint: checkpoint)
        guard start.committedOffset != nil else { return }
        if start.commitIsBeyondTheLog {
            // The topic was recreated: its offsets start over, so nothing below any mark is a
            // reread. What the checkpoint says in event time still holds: windows it had closed
            // stay closed, and source positions it had counted stay counted.
            guard let checkpoint else { return }
            horizonBeyondTheLog = checkpoint.evictedBefore
            floors = checkpoint.seen
            return
        }
        committed = start.committedOffset
        guard let checkpoint else { return }
        metadata = start.metadata
        floors = checkpoint.seen
        committedChangelog = checkpoint.changelog
    }

    /// The changelog is read back only from where the last commit's line of owners began
    /// writing it. Without a commit, an owner continues the line that wrote last if it counted
    /// the same input in windows of the same size for the same group (its owner died before
    /// its first commit); any other commit (an offset
    /// reset, a recreated topic) begins a new line.
    private static func lineage(_ start: PartitionStart, checkpoint: Checkpoint?) -> TaskChangelog.Lineage {
        guard start.committedOffset != nil else { return .lastWritten }
        guard let checkpoint, !start.commitIsBeyondTheLog else { return .new }
        return .committed(since: checkpoint.changelogSince)
    }

}
