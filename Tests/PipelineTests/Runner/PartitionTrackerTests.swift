import Kafka
import Testing
@testable import Pipeline
@testable import Runner

/// The admission guard, on what it needs of each event.
@Suite("partition tracker")
struct PartitionTrackerTests {
    let tp = TopicPartition(topic: "hits", partition: 0)

    func records(_ offsets: ClosedRange<Int64>, of partition: Int32 = 0, from index: Int) -> [(index: Int, sighting: PartitionTracker.Sighting)] {
        offsets.enumerated().map { (index + $0.offset, .record(partition: partition, offset: $0.element)) }
    }

    @Test("a partition revoked and assigned again while one batch was gathered: the records from before the revoke are dropped, the re-read ones taken")
    func revokedAndReassignedWithinABatch() {
        var tracker = PartitionTracker(topic: "hits")
        // The batch began with records 100-149 of the old assignment. Then, inside the same
        // poll, the partition was revoked (its commit said 40) and assigned again from 40.
        tracker.take(tp, committed: 40, metadata: nil)
        let sightings = records(100...149, from: 0) + records(40...60, from: 50)
        let sifted = tracker.sift(sightings, revocations: [ConsumerBatch.Revocation(before: 50, partitions: [tp])])
        #expect(sifted.taken == Array(50...70), "the re-read records, from the new assignment's start")
        #expect(sifted.stale == 50 && sifted.gaps.isEmpty)
        #expect(tracker[tp]?.offsets.nextToRead == 61)
    }

    @Test("an assignment lost while gathering drops every record gathered before")
    func lostAssignment() {
        var tracker = PartitionTracker(topic: "hits")
        tracker.take(tp, committed: 0, metadata: nil)
        let sifted = tracker.sift(records(5...9, from: 0) + records(0...2, from: 5), revocations: [ConsumerBatch.Revocation(before: 5, partitions: nil)])
        #expect(sifted.taken == [5, 6, 7] && sifted.stale == 5)
    }

    @Test("stale offsets are dropped, jumps are taken and reported, records of partitions not owned are dropped")
    func guardWithoutRebalance() {
        var tracker = PartitionTracker(topic: "hits")
        tracker.take(tp, committed: 10, metadata: nil)
        let sightings = records(9...10, from: 0) + records(15...15, from: 2) + [(3, .record(partition: 7, offset: 0))]
        let sifted = tracker.sift(sightings, revocations: [])
        #expect(sifted.taken == [1, 2] && sifted.stale == 2)
        #expect(sifted.gaps.map { "\($0.partition)@\($0.from ?? -1)->\($0.to)" } == ["hits[0]@11->15"])
    }

    @Test("a partition held back for its state: records that slip through are dropped and it is sought back to its start; one that saw none flows without a seek")
    func heldBackForState() {
        var tracker = PartitionTracker(topic: "hits")
        let quiet = TopicPartition(topic: "hits", partition: 1)
        tracker.take(tp, committed: 40, metadata: nil)
        tracker.take(quiet, committed: 7, metadata: nil)
        tracker.apply(.stateAwaited, to: [0, 1])
        let slipped = tracker.sift(records(40...44, from: 0), revocations: [])
        #expect(slipped.taken.isEmpty && slipped.stale == 5, "nothing reaches the stage before the state is in")
        let first = tracker.letThrough(0)
        #expect(first.start == 40 && first.seek, "the consumer moved past the start: sought back")
        let second = tracker.letThrough(1)
        #expect(second.start == 7 && !second.seek, "nothing slipped through: it starts where it is")
        #expect(tracker.sift(records(40...41, from: 0), revocations: []).taken == [0, 1], "after the seek, from the start")
    }
}

extension PartitionTrackerTests {
    @Test("at a bounded run's end, offsets before it never delivered are a jump like any other (by a record past the end, or the partition's end); an end gathered before a revocation says nothing of the assignment after it")
    func endOfABoundedRun() {
        var tracker = PartitionTracker(topic: "hits")
        let other = TopicPartition(topic: "hits", partition: 1)
        tracker.take(tp, committed: 10, metadata: nil)
        tracker.take(other, committed: 0, metadata: nil)
        tracker.noteEnds([TopicPartitionOffset(tp, offset: 20), TopicPartitionOffset(other, offset: 5)], beginnings: [])
        // Partition 0: 10-12 read, then a record past the end: 13-19 never delivered.
        var sifted = tracker.sift(records(10...12, from: 0) + [(3, .record(partition: 0, offset: 21))], revocations: [])
        #expect(sifted.taken == [0, 1, 2])
        #expect(sifted.gaps.map { "\($0.partition.partition)@\($0.from ?? -1)->\($0.to)" } == ["0@13->20"])
        #expect(tracker[tp]?.atEnd == true && tracker[tp]?.offsets.nextToRead == 20)
        // Partition 1: its end reached in a batch in which it was revoked and assigned again:
        // the end belongs to the assignment before, and the re-read records come.
        sifted = tracker.sift([(0, .partitionEnd(partition: 1, offset: 5))], revocations: [ConsumerBatch.Revocation(before: 1, partitions: [other])])
        #expect(sifted.gaps.isEmpty && tracker[other]?.atEnd == false)
        // Then 0-3 read and the partition's end at 5: a trailing marker at 4, a jump.
        sifted = tracker.sift(records(0...3, of: 1, from: 0) + [(4, .partitionEnd(partition: 1, offset: 5))], revocations: [])
        #expect(sifted.taken == [0, 1, 2, 3])
        #expect(sifted.gaps.map { "\($0.partition.partition)@\($0.from ?? -1)->\($0.to)" } == ["1@4->5"])
        #expect(tracker.allAtEnd)
        // Reported once: the end again adds nothing.
        #expect(tracker.sift([(0, .partitionEnd(partition: 1, offset: 5))], revocations: []).gaps.isEmpty)
    }

    @Test("the consumer says a partition ended before the bounded run knew its bound (the lookup failed and is asked again): the bound learned later finds it at its end, with the trailing jump; a record read after that end forgets it")
    func endSeenBeforeTheBound() {
        var tracker = PartitionTracker(topic: "hits")
        let other = TopicPartition(topic: "hits", partition: 1)
        tracker.take(tp, committed: 0, metadata: nil)
        tracker.take(other, committed: 0, metadata: nil)
        // Partition 0: 0-2 read, then its end at 4 (a trailing marker at 3), no bound known yet.
        var sifted = tracker.sift(records(0...2, from: 0) + [(3, .partitionEnd(partition: 0, offset: 4))], revocations: [])
        #expect(sifted.gaps.isEmpty && tracker[tp]?.atEnd == false, "nothing to judge the end against yet")
        // Partition 1: its end at 2 reported, then a record at 2 written after it.
        sifted = tracker.sift(records(0...1, of: 1, from: 0) + [(2, .partitionEnd(partition: 1, offset: 2))], revocations: [])
        sifted = tracker.sift(records(2...2, of: 1, from: 0), revocations: [])
        #expect(!tracker.allAtEnd)
        let gaps = tracker.noteEnds([TopicPartitionOffset(tp, offset: 4), TopicPartitionOffset(other, offset: 5)], beginnings: [])
        #expect(gaps.map { "\($0.partition.partition)@\($0.from ?? -1)->\($0.to)" } == ["0@3->4"], "the marker is a jump, as at any end")
        #expect(tracker[tp]?.atEnd == true && tracker[tp]?.offsets.nextToRead == 4)
        #expect(tracker[other]?.atEnd == false, "the end it reported lies before the records read since: reading goes on to 5")
        #expect(tracker.withoutEnd.isEmpty)
    }

    @Test("a bounded run's partitions held by other members: every partition neither owned nor read to its end, the first and the last; one read to its end and given away is done, one still starting is not owned")
    func heldByOthers() {
        var tracker = PartitionTracker(topic: "hits")
        #expect(tracker.heldByOthers(of: 4) == [0, 1, 2, 3], "owning nothing, every partition is another's")
        let last = TopicPartition(topic: "hits", partition: 3)
        tracker.take(tp, committed: 0, metadata: nil)
        _ = tracker.awaitStart([last])
        #expect(tracker.heldByOthers(of: 4) == [1, 2, 3])
        tracker.noteEnds([TopicPartitionOffset(tp, offset: 2)], beginnings: [])
        _ = tracker.sift(records(0...1, from: 0), revocations: [])
        #expect(tracker[tp]?.atEnd == true && tracker.ownedAtEnd)
        tracker.release([tp])
        #expect(tracker.heldByOthers(of: 4) == [1, 2, 3], "read to its end, then given away: done")
        let second = TopicPartition(topic: "hits", partition: 1)
        tracker.take(second, committed: 0, metadata: nil)
        tracker.release([second])
        #expect(tracker.heldByOthers(of: 4) == [1, 2, 3], "given away before its end: another's again")
    }

    @Test("a commit the log start has passed: reading goes on from the log start, which is where jumps are counted from")
    func readingFromTheLogStart() {
        var tracker = PartitionTracker(topic: "hits")
        tracker.take(tp, committed: 4, metadata: "m", readingFrom: 9)
        #expect(tracker[tp]?.offsets.committed == 4 && tracker[tp]?.offsets.nextToRead == 9)
        let sifted = tracker.sift(records(9...10, from: 0), revocations: [])
        #expect(sifted.taken == [0, 1] && sifted.gaps.isEmpty, "the span to the log start was reported at the assignment, not again")
    }

    @Test("admit hands the stage the records sift takes, in order, from a batch that mixes them with records dropped, partition ends and errors; with none dropped, all of them")
    func admitKeepsWhatSiftTakes() {
        var tracker = PartitionTracker(topic: "hits")
        tracker.take(tp, committed: 10, metadata: nil)
        let other = TopicPartition(topic: "hits", partition: 1)
        tracker.take(other, committed: 0, metadata: nil)
        func record(_ partition: Int32, _ offset: Int64) -> ConsumerEvent<PolledRecord> {
            .record(PolledRecord(partition: partition, offset: offset, key: nil, value: nil, timestamp: nil, headerCount: HeaderCount(of: nil) { _ in 0 }))
        }
        let batch = ListedBatch(events: [
            record(0, 8), record(0, 10), .error(KafkaError(.librdkafka(code: -195), "down")), record(7, 3), record(0, 11),
            .partitionEOF(TopicPartition(topic: "elsewhere", partition: 0), offset: 4), record(1, 0), record(0, 11), record(0, 14),
            .partitionEOF(tp, offset: 15), record(1, 1),
        ])
        var records: [PolledRecord] = []
        let admitted = tracker.admit(batch, into: &records)
        #expect(records.map { "\($0.partition)@\($0.offset)" } == ["0@10", "0@11", "1@0", "0@14", "1@1"])
        #expect(admitted.stale == 3 && admitted.errors.count == 1 && admitted.gaps.count == 1)
        let next = ListedBatch(events: [record(0, 15), record(1, 2), record(0, 16)])
        _ = tracker.admit(next, into: &records)
        #expect(records.map { "\($0.partition)@\($0.offset)" } == ["0@15", "1@2", "0@16"], "the buffer emptied first")
    }
}

/// A poll's events listed in memory.
private struct ListedBatch: PolledBatch {
    let events: [ConsumerEvent<PolledRecord>]
    var revocations: [ConsumerBatch.Revocation] { [] }
    var count: Int { events.count }
    func event(at index: Int) -> ConsumerEvent<PolledRecord> { events[index] }
}

extension PartitionTracker {
    /// The guard's verdict on `sightings` with the indices it takes beside it.
    mutating func sift(
        _ sightings: [(index: Int, sighting: Sighting)], revocations: [ConsumerBatch.Revocation]
    ) -> (taken: [Int], stale: Int, gaps: [InputSpan]) {
        var taken: [Int] = []
        let sifted = sift(sightings, revocations: revocations, taken: &taken)
        return (taken, sifted.stale, sifted.gaps)
    }
}
