import RecordFormats
import Runner
import Kafka

/// What a window task that starts without a commit must find where it begins reading, for
/// every record its group wrote to the partition before to be still there (docs/scale-out.md,
/// "Lost input"). Such a task reads from the partition's log start, where no gap in offsets
/// can show that the log start had passed records nobody read; two things can:
///
/// - behind the shuffle, the first record naming each source partition must begin the group's
///   records of it in the partition (`RepartitionRecord`): a normalize owner commits a source
///   only once every repartition partition has such a record, so any other first record means
///   the beginning was deleted before this task read it;
/// - the task read back state that owners who never committed had written (one died between
///   its state write and its commit). They had read the partition from where they began up to
///   their processed mark, so reading must begin at or below it; and behind the shuffle it must
///   begin where they began: only by reading their records again does the duplicate filter
///   learn which source positions they had counted (it has no checkpoint to start from), and a
///   copy an upstream sent again of a record deleted since would be counted twice. So any
///   record deleted before the first one read is reported, and the log start says whether any
///   was.
///
/// A task with a commit has nothing to check here: the runner compares the commit with the log
/// start. What is found is reported once, as unread offsets the runner judges by the log start.
struct FirstRead: Sendable {
    /// Whether the first record naming each source is checked (behind the shuffle, without a
    /// checkpoint to go on from).
    let checksSources: Bool
    /// The partition the task reads, as what it finds names it.
    let partition: TopicPartition
    /// The processed mark of the owners whose state was read back, when they never committed.
    private(set) var restoredMark: Int64?
    /// The offset of the first record the task read.
    private(set) var firstOffset: Int64?
    private var checked: Set<SourceKey> = []
    private var reported = false

    init(checksSources: Bool, partition: TopicPartition) {
        self.checksSources = checksSources
        self.partition = partition
    }

    /// The state read back was written by owners that had processed everything below `mark`
    /// without committing it.
    mutating func restored(mark: Int64) { restoredMark = mark }

    /// A batch whose first record is at `first`: what it shows the group never read.
    mutating func check(_ batch: DecodedBatch, first: Int64) -> [InputSpan] {
        guard !reported else { return [] }
        if firstOffset == nil {
            firstOffset = first
            if let mark = restoredMark {
                reported = true
                if checksSources {
                    return [
                        InputSpan(
                            partition: partition, from: nil, to: first,
                            cause: .firstRead(
                                "the state read back was counted by owners that never committed, up to offset \(mark); reading began at \(first), and the duplicate filter learns what they counted only from the records they read"))
                    ]
                }
                guard first > mark else { return [] }
                return [
                    InputSpan(
                        partition: partition, from: mark, to: first,
                        cause: .firstRead("the state read back had counted the partition up to offset \(mark), and reading began at \(first)"))
                ]
            }
        }
        guard checksSources, let start = firstOffset else { return [] }
        var missing: [SourceKey] = []
        // Only sources not checked yet: after a task's first batches, none (sorting every
        // batch's sightings cost a task behind 32 input partitions about 17,000 instructions a batch).
        let checked = self.checked
        let unchecked = batch.firstSightings.lazy.filter { !checked.contains($0.key) }
        for (source, sighting) in unchecked.sorted(by: { ($0.value.offset, $0.key) < ($1.value.offset, $1.key) }) {
            self.checked.insert(source)
            if !sighting.begins { missing.append(source) }
        }
        guard !missing.isEmpty else { return [] }
        reported = true
        return [
            InputSpan(
                partition: partition, from: nil, to: start,
                cause: .firstRead(
                    "the first records naming input partitions \(missing.map(\.partition).sorted()) are not where the group began writing them, and reading began at \(start)"
                ))
        ]
    }
}
