import Testing
import TrackingDomain
import Windowing
@testable import Pipeline
@testable import RecordFormats
@testable import Runner

/// A window task's beginning and phases as pure values: every shape of commit, and every
/// event in every phase, without an engine, a changelog or Kafka.
@Suite("Aggregate task: start and phases")
struct TaskStateTests {
    static let incarnation: UInt64 = 7
    static let seen = [Int32(0): SourceFloor(incarnation: incarnation, offset: 41)]

    // MARK: The start

    @Test("no commit: nothing to restore or reread; a changelog continues the line that wrote last")
    func noCommit() {
        let start = TaskStart(PartitionStart(partition: 3, logStart: 10, logEnd: 20), checkpoint: nil)
        #expect(start == TaskStart(PartitionStart(partition: 3), checkpoint: nil))
        #expect(start.committed == nil && start.metadata == nil && start.horizonBeyondTheLog == nil)
        #expect(start.floors == nil && start.committedChangelog == nil)
        #expect(start.lineage == .lastWritten)
        #expect(TaskPhase.initial(start: start) == .restoring(committedChangelog: nil))
    }

    @Test("a commit without a checkpoint (another tool's, or a reset): resumed from, nothing else, a new line of owners")
    func commitWithoutCheckpoint() {
        let start = TaskStart(PartitionStart(partition: 0, committedOffset: 5, metadata: "someone else's", logEnd: 9), checkpoint: nil)
        #expect(start.committed == 5 && start.metadata == nil)
        #expect(start.horizonBeyondTheLog == nil && start.floors == nil && start.committedChangelog == nil)
        #expect(start.lineage == .new)
    }

    @Test("a checkpoint with a changelog: the windows are read back, its line of owners goes on, nothing is reread by the commit alone")
    func checkpointWithChangelog() {
        let checkpoint = Checkpoint(evictedBefore: 1_000, processedMark: 12, seen: Self.seen, changelog: 30, changelogSince: 4, windowSize: 60_000)
        let start = TaskStart(PartitionStart(partition: 0, committedOffset: 12, metadata: checkpoint.encoded), checkpoint: checkpoint)
        #expect(start.committed == 12 && start.metadata == checkpoint.encoded)
        #expect(start.committedChangelog == 30)
        #expect(start.lineage == .committed(since: 4))
        #expect(start.horizonBeyondTheLog == nil)
        #expect(start.floors == Self.seen)
        #expect(TaskPhase.initial(start: start) == .restoring(committedChangelog: 30))
    }

    @Test("a commit beyond the log (the topic recreated): no offset holds, what the checkpoint says in event time does")
    func commitBeyondTheLog() {
        let checkpoint = Checkpoint(evictedBefore: 1_000, processedMark: 12, seen: Self.seen, changelog: 30, changelogSince: 4, windowSize: 60_000)
        let start = TaskStart(PartitionStart(partition: 0, committedOffset: 12, metadata: checkpoint.encoded, logEnd: 3), checkpoint: checkpoint)
        #expect(start.committed == nil && start.metadata == nil && start.committedChangelog == nil)
        #expect(start.horizonBeyondTheLog == 1_000)
        #expect(start.floors == Self.seen)
        #expect(start.lineage == .new)

        let bare = TaskStart(PartitionStart(partition: 0, committedOffset: 12, metadata: nil, logEnd: 3), checkpoint: nil)
        #expect(bare.committed == nil && bare.horizonBeyondTheLog == nil && bare.floors == nil && bare.lineage == .new)
    }

    // MARK: The phases

    @Test("restoring: the state read decides between a reread, settling and running; records change nothing")
    func fromRestoring() {
        let restoring = TaskPhase.restoring(committedChangelog: 30)
        #expect(TaskPhase.transition(restoring, on: .stateRead(belowMark: true, countedPast: 60, processed: 20)) == .rereading(countedPast: 60))
        #expect(TaskPhase.transition(restoring, on: .stateRead(belowMark: false, countedPast: nil, processed: 40)) == .running)
        // Heads of a cut state write counted past the mark, up to 60: settling until the input passes it.
        #expect(TaskPhase.transition(restoring, on: .stateRead(belowMark: false, countedPast: 60, processed: 40)) == .settling(countedPast: 60))
        #expect(TaskPhase.transition(restoring, on: .stateRead(belowMark: false, countedPast: 60, processed: 60)) == .running)
        #expect(TaskPhase.transition(restoring, on: .processed(belowMark: false, processed: 50)) == restoring)
    }

    @Test("rereading: leaves once a batch reaches the mark, and only then; to running, or settling while the heads read back reach further")
    func fromRereading() {
        let rereading = TaskPhase.rereading(countedPast: 60)
        #expect(TaskPhase.transition(rereading, on: .processed(belowMark: true, processed: 30)) == rereading)
        #expect(TaskPhase.transition(rereading, on: .processed(belowMark: false, processed: 45)) == .settling(countedPast: 60))
        #expect(TaskPhase.transition(rereading, on: .processed(belowMark: false, processed: 61)) == .running)
        #expect(TaskPhase.transition(.rereading(countedPast: nil), on: .processed(belowMark: false, processed: 45)) == .running)
        #expect(TaskPhase.transition(rereading, on: .stateRead(belowMark: false, countedPast: nil, processed: 45)) == rereading)
    }

    @Test("settling: runs once the input passes what the windows read back counted")
    func fromSettling() {
        let settling = TaskPhase.settling(countedPast: 60)
        #expect(TaskPhase.transition(settling, on: .processed(belowMark: false, processed: 59)) == settling)
        #expect(TaskPhase.transition(settling, on: .processed(belowMark: false, processed: 60)) == .running)
        #expect(TaskPhase.transition(settling, on: .stateRead(belowMark: false, countedPast: nil, processed: 70)) == settling)
    }

    @Test("running is final")
    func fromRunning() {
        for event in [
            TaskPhase.Event.processed(belowMark: true, processed: 5), .processed(belowMark: false, processed: 5),
            .stateRead(belowMark: true, countedPast: 9, processed: 5),
        ] {
            #expect(TaskPhase.transition(.running, on: event) == .running)
        }
    }

    @Test("handle says when the task has just begun running, once: after the reread and the settling, when the engine may let go of what judged them")
    func caughtUpOnce() {
        var phase = TaskPhase.rereading(countedPast: 60)
        let stillRereading = phase.handle(.processed(belowMark: true, processed: 30))
        #expect(!stillRereading)
        let settling = phase.handle(.processed(belowMark: false, processed: 45))
        #expect(!settling && phase == .settling(countedPast: 60))
        let caughtUp = phase.handle(.processed(belowMark: false, processed: 60))
        #expect(caughtUp && phase == .running)
        let again = phase.handle(.processed(belowMark: false, processed: 70))
        #expect(!again)
        var restoring = TaskPhase.restoring(committedChangelog: nil)
        let restored = restoring.handle(.stateRead(belowMark: false, countedPast: nil, processed: 0))
        #expect(restored && restoring == .running)
    }

    // MARK: Through the stage

    @Test("a changelog that contradicts the commit is refused, and its partition's state is never taken as read")
    func refusedStateEndsTheRestore() throws {
        var stage = AggregateStage(
            sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000),
            window: WindowConfig(idleTimeout: 2_000), shards: 1)
        let checkpoint = Checkpoint(evictedBefore: 0, processedMark: 10, changelog: 5, changelogSince: 0, identity: TestGroup.oneStage())
        try stage.assign([PartitionStart(partition: 0, committedOffset: 10, metadata: checkpoint.encoded, logStart: 0)], now: 0)
        #expect(stage.partitionsAwaitingState == [0])
        stage.restoreState([], partition: 0)
        #expect(throws: PipelineError.self) { try stage.stateRestored(partition: 0, now: 0) }
        // Nothing of the task is counted, emitted or committed: the worker stops on the error.
        #expect(stage.partitionsAwaitingState == [0])
        #expect(stage.commitPoints().isEmpty)
    }
}
