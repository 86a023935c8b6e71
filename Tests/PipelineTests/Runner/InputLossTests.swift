import Kafka
import Logging
import Testing
import TrackpipeSimulation

@testable import Pipeline
@testable import Runner

/// The lost-input rule: a position not yet read is lost when the log start has passed it; offsets
/// never delivered that the log still holds (transaction markers, records compaction removed)
/// are not loss. First the rule on its own, then the real runner reading an input laid out by
/// hand on the simulated cluster (`GapProbe`): the first record, the last, markers in the middle
/// and at the end, compaction holes, a log start past a commit, retention while reading.
@Suite("lost input: the log start tells loss from gaps")
struct InputLossTests {
    typealias Slot = GapProbe.Slot

    static func span(_ from: Int64?, _ to: Int64, cause: InputSpan.Cause = .jump, partition: Int32 = 0) -> InputSpan {
        InputSpan(partition: TopicPartition(topic: "hits", partition: partition), from: from, to: to, cause: cause)
    }

    @Test("the rule: what of a span never delivered lies below the log start is lost, the rest was never records")
    func rule() {
        // A jump over markers or compaction holes, the log starting below it: nothing lost.
        #expect(InputLoss.lost(Self.span(10, 14), logStart: 0) == nil)
        #expect(InputLoss.lost(Self.span(10, 14), logStart: 10) == nil, "the log starts at the first offset of the jump: it still holds it")
        // Retention passed the whole jump, or part of it.
        #expect(InputLoss.lost(Self.span(10, 14), logStart: 14).map { [$0.from, $0.to] } == [10, 14])
        #expect(InputLoss.lost(Self.span(10, 14), logStart: 20).map { [$0.from, $0.to] } == [10, 14], "never past the jump's end")
        #expect(InputLoss.lost(Self.span(10, 14), logStart: 12).map { [$0.from, $0.to] } == [10, 12], "markers above the log start are not loss")
        // A commit the log start has passed, at the first record.
        #expect(InputLoss.lost(Self.span(0, 5), logStart: 5).map { [$0.from, $0.to] } == [0, 5])
        // Every record before an offset (a window task's first read): lost only where the log
        // start moved at all.
        #expect(InputLoss.lost(Self.span(nil, 40), logStart: 0) == nil)
        #expect(InputLoss.lost(Self.span(nil, 40), logStart: 30).map { [$0.from, $0.to] } == [nil, 30])
        #expect(InputLoss.lost(Self.span(nil, 0), logStart: 0) == nil)
        #expect(InputSpan(partition: TopicPartition(topic: "r", partition: 1), from: nil, to: 30, cause: .firstRead("")).count == 30)
    }

    @Test("markers in the middle and at the end and compaction holes: every hit read, gaps counted, nothing lost")
    func markersAndHolesAreNotLost() {
        let outcome = GapProbe.boundedRun([
            GapProbe.Partition([.hit, .hit, .marker, .hit, .marker, .marker, .marker, .hit, .hit, .marker]),
            GapProbe.Partition([.marker, .hit, .hit, .marker, .hit], committed: 0),
            GapProbe.Partition([.hit, .marker, .marker], committed: 1),
        ])
        #expect(outcome.error == nil, "\(outcome.error ?? "")")
        #expect(outcome.consumed == 5 + 3 + 0, "every hit after the commits read")
        #expect(outcome.lost.isEmpty, "\(outcome.lost)")
        // Jumps in the middle and at the ends, the first offset (a commit at a marker) included.
        let gaps = outcome.gaps.map { "\($0.partition.partition):\($0.from ?? -1)-\($0.to)" }.sorted()
        #expect(gaps == ["0:2-3", "0:4-7", "0:9-10", "1:0-1", "1:3-4", "2:1-3"], "\(gaps)")
    }

    @Test("the first record: a commit the log start has passed is lost from the commit to the log start; a new group starting where its input begins loses nothing")
    func commitPassedByTheLogStart() {
        let slots = Array(repeating: Slot.hit, count: 12)
        let outcome = GapProbe.boundedRun([
            GapProbe.Partition(slots, committed: 2, deletedBefore: 7),
            GapProbe.Partition(slots, deletedBefore: 7),
            GapProbe.Partition(slots, committed: 9, deletedBefore: 7),
        ])
        #expect(outcome.error == nil, "\(outcome.error ?? "")")
        #expect(outcome.lost == [Self.span(2, 7, cause: .commitBehindLogStart)], "\(outcome.lost)")
        #expect(outcome.consumed == 5 + 5 + 3)
    }

    @Test("a new group begins where its input began at assignment: records deleted before its first fetch are lost, not skipped, and named with where the log began")
    func newGroupLosesWhatVanishesBeforeItsFirstFetch() {
        // No commit; the partition holds 0-11 at assignment, and retention deletes 0-6 before
        // anything is fetched.
        let outcome = GapProbe.boundedRun([GapProbe.Partition(Array(repeating: .hit, count: 12), deletedAtAssignment: 7)])
        #expect(outcome.error == nil, "\(outcome.error ?? "")")
        #expect(outcome.lost == [Self.span(0, 7, cause: .groupStart)], "\(outcome.lost)")
        #expect(outcome.consumed == 5)
        #expect(outcome.summary?.committed.map(\.offset) == [12])
        let reason = Self.span(0, 7, cause: .groupStart).reason
        #expect(reason.contains("the group had committed nothing and the partition began at offset 0 when it was assigned"), "\(reason)")
    }

    @Test("the start judge: a commit reads on from itself, or from the log start past it (the rest lost); no commit begins at the log start seen at assignment")
    func startJudge() {
        let tp = TopicPartition(topic: "hits", partition: 0)
        #expect(InputLoss.start(of: tp, committed: 5, logStart: 2) == (5, nil))
        #expect(InputLoss.start(of: tp, committed: 5, logStart: 9) == (9, Self.span(5, 9, cause: .commitBehindLogStart)))
        #expect(InputLoss.start(of: tp, committed: nil, logStart: 9) == (9, nil))
        #expect(InputLoss.start(of: tp, committed: nil, logStart: nil) == (nil, nil), "not known: where the reset policy puts it")
        var tracker = PartitionTracker(topic: "hits")
        tracker.take(tp, committed: nil, metadata: nil, readingFrom: 3_000)
        var taken: [Int] = []
        let first = tracker.sift([(0, .record(partition: 0, offset: 7_135))], revocations: [], taken: &taken)
        #expect(first.gaps == [InputSpan(partition: tp, from: 3_000, to: 7_135, cause: .groupStart)])
        let later = tracker.sift([(0, .record(partition: 0, offset: 7_140))], revocations: [], taken: &taken)
        #expect(later.gaps == [InputSpan(partition: tp, from: 7_136, to: 7_140, cause: .jump)], "after the first delivery a jump is a jump")
    }

    @Test("retention while the group reads: what the log start passed before it was read is lost; markers above it are not")
    func retentionWhileReading() {
        // Three records read (a poll's worth), then the log start moves to 8: 3-7 lost, 8 on read.
        let plain = GapProbe.boundedRun([GapProbe.Partition(Array(repeating: .hit, count: 12), committed: 0, deletedWhileReading: (after: 3, to: 8))])
        #expect(plain.error == nil, "\(plain.error ?? "")")
        #expect(plain.lost == [Self.span(3, 8)], "\(plain.lost)")
        #expect(plain.consumed == 3 + 4)
        // Markers at 4-6, and the log start moves into them (to 5): 3 and 4 lost, 5 and 6 were
        // never records.
        let marked = GapProbe.boundedRun([
            GapProbe.Partition([.hit, .hit, .hit, .hit, .marker, .marker, .marker, .hit, .hit], committed: 0, deletedWhileReading: (after: 3, to: 5))
        ])
        #expect(marked.error == nil, "\(marked.error ?? "")")
        #expect(marked.lost == [Self.span(3, 5)], "\(marked.lost)")
        #expect(marked.gaps == [Self.span(3, 7)], "one jump, judged in two parts")
        #expect(marked.consumed == 3 + 2)
    }

    @Test("the last record: a bounded run that reaches its end past offsets never delivered judges them as any jump: deleted ones lost, a trailing marker not")
    func theEnd() {
        let outcome = GapProbe.boundedRun([
            // Read 0-2, then retention deletes everything: the partition ends at 10, 3-9 lost.
            GapProbe.Partition(Array(repeating: .hit, count: 10), committed: 0, deletedWhileReading: (after: 3, to: 10)),
            // A trailing transaction marker.
            GapProbe.Partition([.hit, .hit, .marker], committed: 0),
        ])
        #expect(outcome.error == nil, "\(outcome.error ?? "")")
        #expect(outcome.lost == [Self.span(3, 10, cause: .endReached)], "\(outcome.lost)")
        // The commit after the loss is the end, past what was lost: a next run begins there and
        // reports nothing again; past the trailing marker too.
        #expect(outcome.summary?.committed.map(\.offset) == [10, 3], "\(outcome.summary?.committed ?? [])")
        #expect(outcome.gaps.contains(Self.span(2, 3, cause: .endReached, partition: 1)), "the marker is a gap, counted")
    }

    @Test("a bounded run whose lookups of where its partitions end meet a leader moving asks again at the next turns and reads every hit to the end, losing nothing")
    func endLookupsAskedAgain() {
        // No commits: where the partitions start needs no lookup of their ends, so every failed
        // lookup meets the run's own question of where it ends.
        let partitions = [GapProbe.Partition(Array(repeating: .hit, count: 7)), GapProbe.Partition([.hit, .hit, .marker])]
        let outcome = GapProbe.boundedRun(partitions, failedEndLookups: 5)
        #expect(outcome.error == nil, "a leader moving does not end the run: \(outcome.error ?? "")")
        #expect(outcome.consumed == 7 + 2, "read to the ends")
        #expect(outcome.lost.isEmpty, "\(outcome.lost)")
        #expect(outcome.gaps == [Self.span(2, 3, cause: .endReached, partition: 1)], "the end known, the trailing marker is judged as any")
    }

    @Test("one loss found again (a partition taken again with the same commit behind the log start, before it read anything) is counted once")
    func foundOnce() {
        let settings = RunnerSettings(
            topic: "hits", assignment: .group, bound: .unbounded, consumer: KafkaConfig([:]), producer: KafkaConfig([:]), destinations: [:],
            commitInterval: 5_000)
        var watch = LossWatch(
            RunnerContext(stageName: "normalize", settings: settings, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, metrics: nil))
        let tp = TopicPartition(topic: "hits", partition: 0)
        watch.found(InputSpan(partition: tp, from: 2, to: 7, cause: .commitBehindLogStart), logStart: 7)
        watch.found(InputSpan(partition: tp, from: 2, to: 7, cause: .commitBehindLogStart), logStart: 7)
        watch.found(InputSpan(partition: tp, from: 7, to: 9, cause: .jump), logStart: 9)
        watch.found(Self.span(2, 7, cause: .commitBehindLogStart, partition: 1), logStart: 7)
        #expect(watch.lost.map { [Int64($0.partition.partition), $0.from ?? -1, $0.to] } == [[0, 2, 7], [0, 7, 9], [1, 2, 7]])
        // The same offsets found another way (a window task's first read: every record before
        // 9), and a span that reaches past what was reported: only what is new is reported.
        watch.found(InputSpan(partition: tp, from: nil, to: 9, cause: .firstRead("")), logStart: 9)
        watch.found(InputSpan(partition: tp, from: nil, to: 12, cause: .firstRead("")), logStart: 12)
        #expect(watch.lost.count == 5 && watch.lost.map(\.count).reduce(0, +) == 5 + 2 + 5 + 2 + 3, "\(watch.lost)")
        #expect(watch.lost.suffix(2).map { [$0.from ?? -1, $0.to] } == [[0, 2], [9, 12]], "\(watch.lost)")
    }
}
