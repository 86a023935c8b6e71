import CRdKafka
import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing

@Suite("outgoing records: a dead letter cuts itself to fit, no other record is ever cut")
struct OutgoingRecordTests {
    /// A producer that keeps what it is given and, like librdkafka, refuses a record over
    /// `refusesAbove` bytes (key and value) before it is sent.
    final class KeepingProducer: ProducerClient, @unchecked Sendable {
        // @unchecked: used by one test on one thread.
        struct Sent {
            var topic: String
            var key: [UInt8]?
            var value: [UInt8]?
            var headers: [KafkaHeader]
        }
        var sent: [Sent] = []
        var attempts = 0
        let refusesAbove: Int

        init(refusesAbove: Int = .max) { self.refusesAbove = refusesAbove }

        func topic(_ name: String) throws -> ProducerTopic { ProducerTopic(name: name) }

        func send(
            to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
            headers: [KafkaHeader], timestamp: Int64?, token: UInt64
        ) throws {
            attempts += 1
            guard (key?.count ?? 0) + (value?.count ?? 0) <= refusesAbove else {
                throw KafkaError.from(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, "producing to \(topic.name)")
            }
            sent.append(Sent(topic: topic.name, key: key.map { Array($0) }, value: value.map { Array($0) }, headers: headers))
        }

        /// The headers as values: this producer keeps no other kind.
        func send(
            to topic: ProducerTopic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
            headerBlock: KafkaHeaderBlock, timestamp: Int64?, token: UInt64
        ) throws {
            try send(to: topic, partition: partition, key: key, value: value, headers: headerBlock.headers, timestamp: timestamp, token: token)
        }

        func poll(timeoutMilliseconds: Int32) -> Int { 0 }
        func flush(timeoutMilliseconds: Int32) throws {}
        var outstanding: Int { 0 }
        func recordDeleter() throws -> any RecordDeletionClient { throw KafkaError(.clientCreation, "this test purges nothing") }
    }

    let limit = 16_384
    let large = [UInt8](repeating: 7, count: 100_000)

    func sink(_ producer: KeepingProducer) throws -> ProducerSink {
        try ProducerSink(
            producer: producer, topics: [.deadLetter: "dead", .changelog: "state", .output: "out"], lines: [:], discarded: [], backlog: OutputBacklog(),
            recordLimit: RecordLimit(bytes: limit))
    }

    func heldLetter(value: [UInt8]) -> OwnedDeadLetter {
        let letter = DeadLetter(reason: .tooLarge, detail: "too_large", sourceTopic: "hits", sourcePartition: 0, sourceOffset: 9)
        // As librdkafka hands back a letter it refused: its bytes and headers, copied.
        return OwnedDeadLetter(RefusedRecord(key: Array("device-1".utf8), value: value, headers: letter.headers, timestamp: 5))
    }

    @Test("a dead letter larger than a record may be is cut to fit by its own type, and counted")
    func deadLetterCutsItself() throws {
        let letter = heldLetter(value: large)
        let fit = letter.withBytes { key, value in OwnedDeadLetter.fit(key: key, value: value, headers: letter.headers, limit: limit) }
        guard case .cut(let cut) = fit else {
            Issue.record("a dead letter over the limit is cut, not \(fit)")
            return
        }
        #expect(DeadLetterCut.size(keyBytes: cut.keyBytes, valueBytes: cut.valueBytes, headers: cut.headers) <= limit)

        let producer = KeepingProducer()
        var sink = try sink(producer)
        try sink.send(letter)
        #expect(producer.sent.count == 1)
        #expect(producer.sent.first?.value == Array(large[0..<cut.valueBytes]))
        #expect(producer.sent.first?.headers == cut.headers)
        #expect(sink.cutDeadLetters == 1)

        let small = heldLetter(value: [1, 2, 3])
        #expect(small.withBytes { OwnedDeadLetter.fit(key: $0, value: $1, headers: small.headers, limit: limit) } == .fits)
    }

    @Test("a dead letter held until the commit goes with its headers as bytes when it fits, and is cut as any dead letter when it does not")
    func heldDeadLetters() throws {
        let letter = DeadLetter(reason: .tooLarge, detail: "too_large", sourceTopic: "hits", sourcePartition: 0, sourceOffset: 9)
        var held = HeldDeadLetters()
        for value in [[1, 2, 3], large] as [[UInt8]] {
            Array("device-1".utf8).withUnsafeBytes { key in
                value.withUnsafeBytes { value in held.append(OutgoingDeadLetter(letter: letter, key: key, value: value, timestamp: 5)) }
            }
        }
        let producer = KeepingProducer()
        var sink = try sink(producer)
        try held.drain { try sink.send($0) }
        let owned = KeepingProducer()
        var ownedSink = try self.sink(owned)
        for value in [[1, 2, 3], large] as [[UInt8]] { try ownedSink.send(heldLetter(value: value)) }
        #expect(producer.sent.map(\.value) == owned.sent.map(\.value) && producer.sent.map(\.key) == owned.sent.map(\.key))
        #expect(producer.sent.map(\.headers) == owned.sent.map(\.headers))
        #expect(producer.sent.count == 2 && sink.cutDeadLetters == 1)
    }

    @Test("a normalize stage's dead letter goes with its headers as bytes when it fits, and is cut as any dead letter when it does not")
    func inputDeadLetters() throws {
        let letter = DeadLetter(reason: .tooLarge, detail: "too_large: «é»", sourceTopic: "hits", sourcePartition: 0, sourceOffset: 9)
        let producer = KeepingProducer()
        var sink = try sink(producer)
        for value in [[1, 2, 3], large] as [[UInt8]] {
            try Array("device-1".utf8).withUnsafeBytes { key in
                try value.withUnsafeBytes { value in
                    let record = PolledRecord(partition: 0, offset: 9, key: key, value: value, timestamp: 5, headerCount: .known(0))
                    let input = InputDeadLetter(letter: letter, record: record)
                    input.withHeaderBlock { #expect($0?.headers == letter.headers) }
                    try sink.send(input)
                }
            }
        }
        let owned = KeepingProducer()
        var ownedSink = try self.sink(owned)
        for value in [[1, 2, 3], large] as [[UInt8]] {
            try ownedSink.send(OwnedDeadLetter(RefusedRecord(key: Array("device-1".utf8), value: value, headers: letter.headers, timestamp: 5)))
        }
        #expect(producer.sent.map(\.value) == owned.sent.map(\.value) && producer.sent.map(\.key) == owned.sent.map(\.key))
        #expect(producer.sent.map(\.headers) == owned.sent.map(\.headers))
        #expect(producer.sent.count == 2 && sink.cutDeadLetters == 1)
    }

    @Test("a dead letter the producer refuses all the same is tried again at half the limit, until it goes")
    func refusedDeadLetterHalves() throws {
        let producer = KeepingProducer(refusesAbove: limit / 4)
        var sink = try sink(producer)
        try sink.send(heldLetter(value: large))
        #expect(producer.attempts == 3, "cut to the limit, then to half of it, refused both times; a quarter goes")
        #expect(try #require(producer.sent.first?.value).count <= limit / 4)
        #expect(sink.cutDeadLetters == 1)
    }

    @Test("a record of any other type is never cut: sent whole, and refused whole once, with no retry")
    func otherRecordsAreNeverCut() throws {
        var bytes: [UInt8] = []
        let (key, value) = ChangelogRecord.Entry.tombstone(.task).encode(into: &bytes)
        let entry = ChangelogEntry(bytes: bytes, key: key, value: value, partition: 2)
        #expect(entry.withBytes { ChangelogEntry.fit(key: $0, value: $1, headers: [], limit: 0) } == .neverCut)
        let output = AggregateOutput(key: "delivery-1@2024-01-01T00:00:00Z", windowSize: 60_000, value: large)
        #expect(output.withBytes { AggregateOutput.fit(key: $0, value: $1, headers: [], limit: limit) } == .neverCut)

        let producer = KeepingProducer(refusesAbove: limit)
        var sink = try sink(producer)
        try sink.send(entry)
        #expect(throws: KafkaError.self, "refused whole: what to change is for the run to say, not for the sink to mend") {
            try sink.send(output)
        }
        #expect(producer.attempts == 2, "the tombstone went; the large record was tried once")
        #expect(producer.sent.map(\.topic) == ["state"])
        #expect(producer.sent.first?.value == nil, "a tombstone")
        #expect(sink.cutDeadLetters == 0)
    }
}
