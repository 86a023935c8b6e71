import Kafka
import Testing

@testable import Pipeline
@testable import Runner

/// When the aggregate stage purges the repartition topic, and how far: the rules of
/// `PurgeSchedule`, each tried the way a purge could go wrong.
@Suite("purge schedule: after commits, never past them, only what is owned")
struct PurgeScheduleTests {
    static let topic = "g-repartition"

    static func at(_ partition: Int32, _ offset: Int64, metadata: String? = nil) -> TopicPartitionOffset {
        TopicPartitionOffset(topic: topic, partition: partition, offset: offset, metadata: metadata)
    }

    /// `afterCommit`, outside the test macros (they cannot call a mutating method).
    static func ask(_ schedule: inout PurgeSchedule, _ committed: [TopicPartitionOffset], now: Int64) -> [TopicPartitionOffset]? {
        schedule.afterCommit(committed, now: now)
    }

    static func purged(_ asked: [TopicPartitionOffset], start: ((TopicPartitionOffset) -> Int64)? = nil) -> [RecordDeletion] {
        asked.map { RecordDeletion(partition: $0.topicPartition, below: $0.offset, outcome: .success(start?($0) ?? $0.offset)) }
    }

    static func refused(_ asked: [TopicPartitionOffset], _ kind: RecordDeletionError.Kind) -> [RecordDeletion] {
        asked.map {
            RecordDeletion(
                partition: $0.topicPartition, below: $0.offset,
                outcome: .failure(RecordDeletionError(kind, KafkaError(.librdkafka(code: -1), "refused"))))
        }
    }

    @Test("the first commit purges at once; later ones only once the interval has passed since the last request")
    func interval() throws {
        var schedule = PurgeSchedule(interval: 30_000)
        let first = try #require(Self.ask(&schedule, [Self.at(0, 100)], now: 1_000))
        #expect(first == [Self.at(0, 100)])
        schedule.answered(Self.purged(first))
        #expect(schedule.afterCommit([Self.at(0, 200)], now: 6_000) == nil, "5 s later: within the interval")
        #expect(schedule.afterCommit([Self.at(0, 300)], now: 30_999) == nil, "1 ms short of it")
        #expect(schedule.afterCommit([Self.at(0, 400)], now: 31_000) == [Self.at(0, 400)], "what is committed then, all of it")
    }

    @Test("each partition up to its own commit and no further, the commit's metadata dropped; nothing at offset 0, nothing already purged")
    func neverPastTheCommit() throws {
        var schedule = PurgeSchedule(interval: 1)
        let committed = [Self.at(0, 17, metadata: "trackpipe/4 …"), Self.at(1, 0), Self.at(2, 5)]
        let asked = try #require(Self.ask(&schedule, committed, now: 10))
        #expect(asked == [Self.at(0, 17), Self.at(2, 5)], "partition 1 has nothing below its commit")
        #expect(asked.allSatisfy { $0.metadata == nil })
        for (request, commit) in zip(asked, [Self.at(0, 17), Self.at(2, 5)]) { #expect(request.offset <= commit.offset) }
        schedule.answered(Self.purged(asked))
        // Nothing moved: nothing to ask; one partition moved: only it.
        #expect(schedule.afterCommit([Self.at(0, 17), Self.at(2, 5)], now: 20) == nil)
        #expect(schedule.afterCommit([Self.at(0, 17), Self.at(2, 9)], now: 30) == [Self.at(2, 9)])
    }

    @Test("one request at a time: none while one waits for its answer, however many commits pass")
    func oneInFlight() throws {
        var schedule = PurgeSchedule(interval: 1)
        let first = try #require(Self.ask(&schedule, [Self.at(0, 10)], now: 0))
        for now in stride(from: Int64(100), to: 60_000, by: 5_000) {
            #expect(schedule.afterCommit([Self.at(0, 10 + now)], now: now) == nil)
        }
        schedule.answered(Self.purged(first))
        #expect(schedule.afterCommit([Self.at(0, 70_000)], now: 60_000) == [Self.at(0, 70_000)])
    }

    @Test("a refused or failed purge is asked again at the next interval, with what is committed then, for every kind of refusal")
    func retriesAfterTheInterval() throws {
        for kind in RecordDeletionError.Kind.allCases {
            var schedule = PurgeSchedule(interval: 30_000)
            let first = try #require(Self.ask(&schedule, [Self.at(0, 10), Self.at(1, 20)], now: 0))
            schedule.answered(Self.refused(first, kind))
            #expect(schedule.purged.isEmpty, "\(kind): nothing is known deleted")
            #expect(schedule.afterCommit([Self.at(0, 15), Self.at(1, 20)], now: 29_999) == nil, "\(kind)")
            #expect(schedule.afterCommit([Self.at(0, 15), Self.at(1, 20)], now: 30_000) == [Self.at(0, 15), Self.at(1, 20)], "\(kind)")
        }
    }

    @Test("a partition given away is not purged, not even through the answer to a request made while it was owned; taken back, it is purged afresh")
    func givenAway() throws {
        var schedule = PurgeSchedule(interval: 1)
        let asked = try #require(Self.ask(&schedule, [Self.at(0, 10), Self.at(1, 10)], now: 0))
        schedule.released([TopicPartition(topic: Self.topic, partition: 1)])
        #expect(schedule.inFlight == [Self.at(0, 10)])
        schedule.answered(Self.purged(asked))
        #expect(schedule.purged == [TopicPartition(topic: Self.topic, partition: 0): 10], "the answer says nothing of partition 1 any more")
        // The runner passes only what it owns: partition 1 comes back later from another owner's commit.
        #expect(schedule.afterCommit([Self.at(0, 10)], now: 5) == nil)
        #expect(schedule.afterCommit([Self.at(0, 10), Self.at(1, 40)], now: 10) == [Self.at(1, 40)])
    }

    @Test("a log start above the offset asked (another owner's purge, or retention) is what is known deleted: nothing below it is asked again")
    func higherLogStart() throws {
        var schedule = PurgeSchedule(interval: 1)
        let asked = try #require(Self.ask(&schedule, [Self.at(0, 10)], now: 0))
        schedule.answered(Self.purged(asked) { _ in 25 })
        #expect(schedule.afterCommit([Self.at(0, 20)], now: 10) == nil)
        #expect(schedule.afterCommit([Self.at(0, 26)], now: 20) == [Self.at(0, 26)])
    }

    @Test("a bounded run's last purge goes whatever the interval, never while a request waits, and never past the commits or for what is purged")
    func atTheEnd() {
        var schedule = PurgeSchedule(interval: 60_000)
        let first = Self.ask(&schedule, [Self.at(0, 10)], now: 1_000)
        #expect(first == [Self.at(0, 10)])
        var end = schedule.atEnd([Self.at(0, 20), Self.at(1, 5)])
        #expect(end == nil, "a request still waits for its answer")
        schedule.answered(Self.purged(first ?? []))
        end = schedule.atEnd([Self.at(0, 20), Self.at(1, 5)])
        #expect(end == [Self.at(0, 20), Self.at(1, 5)], "within the interval of the last request, yet due")
        schedule.answered(Self.purged(end ?? []))
        end = schedule.atEnd([Self.at(0, 20), Self.at(1, 5)])
        #expect(end == nil, "nothing would move")
    }
}
