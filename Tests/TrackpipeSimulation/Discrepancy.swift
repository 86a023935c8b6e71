/// One way a schedule's outcome differs from what the generator's truth demands.
public struct Discrepancy: Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, CaseIterable {
        /// The simulation refused something a stage did (a send to a topic or partition it has
        /// no business with, an unbalanced report, a commit point past what it read).
        case runner = "runner"
        /// A dead letter whose context names no input message, or whose bytes are not the
        /// message's.
        case deadLetterOrigin = "dead-letter-origin"
        /// A `too_late` dead letter without its original message (the hit as normalized), other
        /// than the one exception the originals rule cannot avoid: a window evicted early by the
        /// memory cap.
        case lateWithoutOriginal = "late-without-original"
        /// A message dead-lettered for another reason than its truth, or for two reasons.
        case deadLetterReason = "dead-letter-reason"
        /// A message that must be dead-lettered is not.
        case missingDeadLetter = "missing-dead-letter"
        /// A tracking-off hit was dead-lettered.
        case filteredDeadLettered = "filtered-hit-dead-lettered"
        /// The stages' totals disagree with what was produced (schedules where they must agree).
        case accounting = "accounting"
        /// Input reported lost that retention had not deleted (offsets the log still holds, such
        /// as transaction markers, taken for lost input).
        case falseLoss = "false-loss"
        /// Hits went missing from the output, deleted by retention before they were read, and
        /// nothing was reported lost.
        case silentLoss = "silent-loss"
        /// A window with hits to count has no record.
        case missingKey = "missing-key"
        /// A record for a window that has no hit to count.
        case extraKey = "extra-key"
        /// The last record of a key is not the reference's counts.
        case lastRecord = "last-record"
        /// A record with the highest revision of its key is not the reference's counts.
        case highestRevision = "highest-revision"
        /// A key's revision went down in the output, with no crash to explain it.
        case revisionWentBack = "revision-went-back"
        /// A key's revision went down after a crash (a failure only with strict revisions).
        case revisionWentBackAfterCrash = "revision-went-back-after-crash"
        /// Strict lateness: dead-lettered `too_late` although its partition's progress had not
        /// reached its window's end plus the retention.
        case tooLateTooSoon = "too-late-too-soon"
        /// Strict lateness: counted although its partition's progress had passed its window's
        /// end plus the retention.
        case countedPastRetention = "counted-past-retention"
    }

    public var kind: Kind
    /// A finer name for grouping failures: the kind, and for count differences whether the
    /// output holds fewer or more hits than the reference.
    public var signature: String
    public var key: String?
    public var detail: String

    public var description: String { "[\(signature)] \(key.map { "\($0): " } ?? "")\(detail)" }

    init(_ kind: Kind, key: String? = nil, _ detail: String, refinement: String? = nil) {
        self.kind = kind
        self.signature = refinement.map { "\(kind.rawValue)/\($0)" } ?? kind.rawValue
        self.key = key
        self.detail = detail
    }
}

/// Figures of one schedule, for the report.
public struct ScheduleStats: Sendable {
    public var operations = 0
    public var messages = 0
    public var countedHits = 0
    public var tooLate = 0
    public var deadLetters = 0
    public var outputRecords = 0
    public var keys = 0
    public var crashes = 0
    /// Deaths in the middle of a state write, and of those, the ones inside a merge.
    public var stateWriteCuts = 0
    public var mergeCuts = 0
    /// Starts refused for the internal topics' settings, and warnings of them.
    public var topicRefusals = 0
    public var topicWarnings = 0
    public var rebalances = 0
    /// Times a key's revision went down after a crash (a failure unless strict revisions are
    /// off, see `Discrepancy.Kind`).
    public var steppedBackAfterCrash = 0
    /// Runs of the workers (a new group or reset offsets after a refused switch adds one).
    public var generations = 1
    /// Times the workers refused to start in another mode under the same group.
    public var refusals = 0
    /// Times a key's revision went down where a later generation recounted it (by design).
    public var steppedBackAcrossGenerations = 0
    /// Hits the strict lateness rule was checked on; nil when it was not applied.
    public var strictLatenessChecked: Int?
    /// Hits the quiet-period bound was checked on; nil when it was not applied.
    public var quietBoundChecked: Int?
    /// Records retention deleted (input and repartition topics), and the ranges the runners
    /// reported lost (`firstReads` of them found where a window task without a commit began
    /// reading: every record before an offset).
    public var deletedRecords: Int64 = 0
    public var lostRanges = 0
    public var lostAtFirstReads = 0
    /// `too_late` dead letters that carried the hit as normalized, their window evicted early by
    /// the memory cap (the originals rule's one exception; any other is a discrepancy).
    public var lateWithoutOriginal = 0
    /// Partitions the runners asked to purge, purged, and refused by the cluster.
    public var purgesAsked = 0
    public var purged = 0
    public var purgesRefused = 0
    /// Bytes of records written to the repartition topics, and the bytes they hold at the end.
    public var repartitionBytesWritten = 0
    public var repartitionBytesKept = 0
    /// Of several sizes: the schedule's sizes, windows of a smaller size checked exact against
    /// their own reference, and hits such a window lacked, too late for its size alone (counted
    /// in a larger one), each shown to explain the record; windows whose choices were too many
    /// to try (`ScheduleChecker.lateInThisSize`).
    public var sizes = 1
    public var smallerSizeKeys = 0
    public var lateInSmallerSizes = 0
    public var unexploredKeys = 0

    public var description: String {
        var text =
            "\(operations) operations, \(messages) messages (\(countedHits) hits to count, \(tooLate) too_late), \(deadLetters) dead letters, \(outputRecords) output records over \(keys) keys, \(crashes) crashes, \(rebalances) rebalances"
        if stateWriteCuts > 0 { text += ", \(stateWriteCuts) state writes cut short (\(mergeCuts) in a merge)" }
        if topicRefusals > 0 || topicWarnings > 0 { text += ", \(topicRefusals) starts refused and \(topicWarnings) warnings for the internal topics" }
        if steppedBackAfterCrash > 0 { text += ", \(steppedBackAfterCrash) revisions stepped back after a crash" }
        if refusals > 0 { text += ", \(refusals) switches refused" }
        if generations > 1 { text += ", \(generations) generations (\(steppedBackAcrossGenerations) keys recounted from a lower revision)" }
        if let checked = strictLatenessChecked { text += ", strict lateness checked on \(checked) hits" }
        if let checked = quietBoundChecked { text += ", the quiet bound checked on \(checked) hits" }
        if deletedRecords > 0 || lostRanges > 0 {
            text += ", retention deleted \(deletedRecords) records, \(lostRanges) ranges reported lost (\(lostAtFirstReads) at a first read)"
        }
        if lateWithoutOriginal > 0 { text += ", \(lateWithoutOriginal) too_late without their original (evicted by the cap)" }
        if purgesAsked > 0 { text += ", \(purgesAsked) partition purges asked, \(purged) done, \(purgesRefused) refused" }
        if sizes > 1 {
            text += ", \(sizes) sizes: \(smallerSizeKeys) windows of the smaller sizes exact, \(lateInSmallerSizes) hits too late for a smaller size alone"
            if unexploredKeys > 0 { text += " (\(unexploredKeys) windows with too many choices to try)" }
        }
        if repartitionBytesWritten > 0 { text += ", the repartition topic keeps \(repartitionBytesKept) of \(repartitionBytesWritten) bytes written" }
        return text
    }
}
