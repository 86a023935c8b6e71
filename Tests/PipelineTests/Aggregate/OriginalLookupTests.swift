import Foundation
import Kafka
import Synchronization
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline

/// Hits that cross the shuffle without their original bytes, and the dead letters that read
/// them back from the input topic.
@Suite("Originals left in the input topic")
struct OriginalLookupTests {
    static let minute: Int64 = 60_000
    static let window = WindowConfig(size: minute, grace: 0, retention: minute, idleTimeout: 30_000)

    /// An input topic as a dictionary, answering lookups and noting what was asked.
    final class FakeInput: OriginalLookup, Sendable {
        let messages: [InputPosition: InputMessage]
        let asked = Mutex<[Set<InputPosition>]>([])

        init(_ messages: [InputPosition: InputMessage]) { self.messages = messages }

        func messages(at positions: Set<InputPosition>) throws -> [InputPosition: InputMessage] {
            asked.withLock { $0.append(positions) }
            return messages.filter { positions.contains($0.key) }
        }
    }

    func normalize(_ carrying: OriginalCarrying) -> NormalizeStage {
        NormalizeStage(
            inputTopic: "hits", sourcePartitions: 1, repartitionPartitions: 1, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
            idleTimeout: 30_000, markInterval: 500, carrying: carrying)
    }

    @Test("a hit carries its original only if it arrived so long after its window that the window may be gone downstream")
    func carryingRule() throws {
        let arena = RecordArena()
        var stage = normalize(OriginalCarrying(windowSize: Self.minute, retention: 10 * Self.minute))
        try stage.assign([PartitionStart(partition: 0)], now: 0)
        var sink = RecordingSink()
        let fresh = rawHit("d1", "b1", at: 60 * Self.minute)
        let late = rawHit("d1", "b2", at: 60 * Self.minute)
        let untimed = rawHit("d1", "b3", at: 60 * Self.minute)
        try stage.process(
            [
                // Its window ends at 61 min: it may be gone downstream from 61 + 10/2 = 66 min.
                arena.record(partition: 0, offset: 0, key: Array("k0".utf8), value: fresh, timestamp: 66 * Self.minute - 1),
                arena.record(partition: 0, offset: 1, key: Array("k1".utf8), value: late, timestamp: 66 * Self.minute),
                arena.record(partition: 0, offset: 2, key: nil, value: untimed, timestamp: nil),
            ], now: 0, into: &sink)
        let record = try #require(sink.to(.repartition).first?.value)
        try record.withUnsafeBytes { bytes -> Void in
            guard case .events(let events) = try RepartitionRecord.decode(bytes) else {
                Issue.record("not an events record")
                return
            }
            #expect(events.count == 3)
            #expect(events[0].originalValue == nil && events[0].originalKey == nil)
            #expect(events[0].leftInInput == RepartitionRecord.OriginalShape(keyLength: 2, valueLength: fresh.count))
            #expect(events[1].originalValue.map { Array($0) } == late && events[1].originalKey.map { Array($0) } == Array("k1".utf8))
            #expect(events[1].leftInInput == nil)
            #expect(events[2].originalValue.map { Array($0) } == untimed && events[2].leftInInput == nil, "without a Kafka timestamp, carried")
        }
    }

    /// The aggregate stage reads two repartition records behind a mark that takes the other
    /// source's event time far ahead, so that the second record's hits are too late; returns
    /// the dead letters it sent.
    func aggregateLateHits(_ records: [RecordingSink.Sent], arena: RecordArena, originals: any OriginalLookup) throws -> [RecordingSink.Sent] {
        var stage = AggregateStage(
            sourceTopic: "hits", input: RepartitionInput(partitionCount: 1), window: Self.window, parallelism: 1, originals: originals)
        try stage.assignEmpty([PartitionStart(partition: 0)], now: 0)
        var marks = RecordingSink()
        var other = normalize(.always)
        try other.assign([PartitionStart(partition: 1)], now: 0)
        try other.tick(now: 40_000, into: &marks)
        var sink = RecordingSink()
        try stage.process([arena.record(marks.sent[0], offset: 0), arena.record(records[0], offset: 1)], now: 0, into: &sink)
        try stage.process([arena.record(records[1], offset: 2)], now: 1, into: &sink)
        // The dead letters, their originals read back all at once, go out with the commit.
        try stage.commitAll(now: 1, into: &sink)
        return sink.to(.deadLetter)
    }

    @Test("a too_late hit that crossed without its original is dead-lettered with the message read back from the input, all of a batch in one lookup; one gone or replaced goes with the hit as normalized, and says so")
    func deadLettersReadTheInputBack() throws {
        let arena = RecordArena()
        var upstream = normalize(OriginalCarrying(windowSize: Self.minute, retention: Self.minute))
        try upstream.assign([PartitionStart(partition: 0)], now: 0)
        var shuffle = RecordingSink()
        // Each hit arrives at its own time: none carries its original.
        let hits = [
            rawHit("d1", "a", at: 100 * Self.minute), rawHit("d1", "b1", at: 1 * Self.minute), rawHit("d1", "b2", at: 2 * Self.minute),
            rawHit("d1", "b3", at: 3 * Self.minute),
        ]
        let times: [Int64] = [100, 1, 2, 3].map { $0 * Self.minute }
        try upstream.process([arena.record(partition: 0, offset: 0, value: hits[0], timestamp: times[0])], now: 0, into: &shuffle)
        try upstream.process(
            (1...3).map { arena.record(partition: 0, offset: Int64($0), key: Array("k\($0)".utf8), value: hits[$0], timestamp: times[$0]) },
            now: 0, into: &shuffle)
        let records = shuffle.to(.repartition)
        let input = FakeInput([
            InputPosition(topic: "hits", partition: 0, offset: 1): InputMessage(key: Array("k1".utf8), value: hits[1], timestamp: times[1]),
            // Offset 2 is gone; offset 3 holds another message (the topic was recreated).
            InputPosition(topic: "hits", partition: 0, offset: 3): InputMessage(key: nil, value: Array("{}".utf8), timestamp: times[3]),
        ])
        let letters = try aggregateLateHits(records, arena: arena, originals: input)
        #expect(input.asked.withLock { $0 } == [Set((1...3).map { InputPosition(topic: "hits", partition: 0, offset: Int64($0)) })])
        #expect(letters.count == 3)
        #expect(letters.allSatisfy { $0.header[DeadLetter.Header.reason] == "too_late" })
        #expect(letters.map { $0.header[DeadLetter.Header.sourceOffset] } == ["1", "2", "3"])
        #expect(letters[0].value == hits[1] && letters[0].keyText == "k1" && letters[0].timestamp == times[1])
        for (letter, found) in [(letters[1], "no longer"), (letters[2], "replaced")] {
            let value = String(decoding: letter.value ?? [], as: UTF8.self)
            #expect(value.hasPrefix("{\"deliveryId\":\"d1\",\"broadlogId\":\"b"), "the hit as normalized: \(value)")
            #expect(letter.key == nil)
            #expect(letter.header[DeadLetter.Header.detail]?.contains("the original message was \(found) at hits[0]@") == true)
        }
    }

    @Test("the input read back by position on the embedded broker: exact bytes across partitions, positions beyond the log not found")
    func inputTopicLookup() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("lookup", partitions: 3)
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        for index in 0..<300 {
            try producer.send(
                topic: "lookup", partition: Int32(index % 3), key: index % 7 == 0 ? nil : Array("key-\(index)".utf8),
                value: Array("value-\(index)".utf8), timestamp: 1_000 + Int64(index))
        }
        try producer.flush(timeoutMilliseconds: 300_000)
        let lookup = InputTopicLookup(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "lookup", "log_level": "3"]),
            logger: .init(label: "test"))
        // Index i is at partition i % 3, offset i / 3.
        let indices = [0, 4, 5, 151, 299]
        var positions = Set(indices.map { InputPosition(topic: "lookup", partition: Int32($0 % 3), offset: Int64($0 / 3)) })
        positions.insert(InputPosition(topic: "lookup", partition: 1, offset: 100))  // the log ends at 100
        let found = try lookup.messages(at: positions)
        #expect(found.count == indices.count)
        for index in indices {
            let message = found[InputPosition(topic: "lookup", partition: Int32(index % 3), offset: Int64(index / 3))]
            #expect(message == InputMessage(key: index % 7 == 0 ? nil : Array("key-\(index)".utf8), value: Array("value-\(index)".utf8), timestamp: 1_000 + Int64(index)))
        }
        // The same reader again, for others.
        let again = try lookup.messages(at: [InputPosition(topic: "lookup", partition: 2, offset: 99)])
        #expect(again.values.first?.value == Array("value-299".utf8))
    }

    @Test("with the input's leader down a lookup gives up within its bound (it runs inside commits and revokes), and the dead letters go with the hit as normalized, naming the position")
    func lookupBoundedWhenTheLeaderIsDown() throws {
        let broker = try EmbeddedBroker(brokers: 2)
        try broker.createTopic("lookup", partitions: 2)
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        for index in 0..<10 {
            try producer.send(topic: "lookup", partition: 1, key: nil, value: Array("value-\(index)".utf8), timestamp: 1_000 + Int64(index))
        }
        try producer.flush(timeoutMilliseconds: 300_000)
        try broker.setLeader("lookup", partition: 1, brokerId: 2)
        try broker.setBrokerDown(2)
        let lookup = InputTopicLookup(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "lookup", "log_level": "0"]),
            logger: .init(label: "test"))
        let started = Date()
        var failure = ""
        do {
            _ = try lookup.messages(at: [InputPosition(topic: "lookup", partition: 1, offset: 3)])
            Issue.record("read from a partition whose leader is down")
        } catch {
            failure = "\(error)"
        }
        let waited = Date().timeIntervalSince(started)
        print("lookup with the input's leader down gave up after \(String(format: "%.1f", waited)) s: \(failure)")
        #expect(failure.contains("lookup[1]"), "\(failure)")
        // The bound is 10 s; the old one was 120 s. Generous for a loaded machine, and far below
        // the group's rebalance timeout (300 s).
        #expect(waited < 60, "a revoke would have waited \(waited) s")

        // What the aggregate stage does with such a failure: the letters go all the same.
        let arena = RecordArena()
        var upstream = normalize(OriginalCarrying(windowSize: Self.minute, retention: Self.minute))
        try upstream.assign([PartitionStart(partition: 0)], now: 0)
        var shuffle = RecordingSink()
        try upstream.process([arena.record(partition: 0, offset: 0, value: rawHit("d1", "a", at: 100 * Self.minute), timestamp: 100 * Self.minute)], now: 0, into: &shuffle)
        try upstream.process([arena.record(partition: 0, offset: 1, key: Array("k1".utf8), value: rawHit("d1", "b", at: Self.minute), timestamp: Self.minute)], now: 0, into: &shuffle)
        let letters = try aggregateLateHits(shuffle.to(.repartition), arena: arena, originals: UnreachableInput())
        try #require(letters.count == 1)
        #expect(letters[0].header[DeadLetter.Header.reason] == "too_late")
        #expect(String(decoding: letters[0].value ?? [], as: UTF8.self).hasPrefix("{\"deliveryId\":\"d1\",\"broadlogId\":\"b\""))
        #expect(letters[0].header[DeadLetter.Header.detail]?.contains("the original message at hits[0]@1 could not be read back (the input's leader does not answer)") == true)
    }
}

/// An input whose leaders never answer.
struct UnreachableInput: OriginalLookup {
    struct Unreachable: Error, CustomStringConvertible { var description: String { "the input's leader does not answer" } }
    func messages(at positions: Set<InputPosition>) throws -> [InputPosition: InputMessage] { throw Unreachable() }
}
