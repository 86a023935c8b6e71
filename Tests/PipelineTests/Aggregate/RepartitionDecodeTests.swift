import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline
@testable import RecordFormats

/// The aggregate stage's reading of the repartition topic (`RepartitionInput.decode`, which
/// appends a record's events as it reads them) against the records read whole
/// (`RepartitionRecord.decode`, which dead letters and inspection use): the same events on the
/// format's edge cases, and a record that cannot be read refused whole.
@Suite("Repartition decoding")
struct RepartitionDecodeTests {
    static let origin = RepartitionRecord.Origin(sourceTopic: "hits", sourcePartitions: 8, routedPartitions: 1, group: "g")
    static let clock: Int64 = 1_795_300_000_000

    struct Written {
        var delivery: String
        var broadlog: String
        var source: Int32
        var epoch: UInt32 = 1
        var offset: Int64
        var original: [UInt8]? = nil
    }

    /// One events record of `events`, each original (if any) its event's key and value, cut to
    /// `maxOriginalBytes`.
    static func record(_ events: [Written], maxOriginalBytes: Int = .max) -> [UInt8] {
        var writer = RepartitionRecord.EventsWriter()
        writer.begin(partition: 0, origin: origin, writerClock: clock)
        for (number, item) in events.enumerated() {
            let event = TrackingEvent(
                deliveryId: DeliveryID(item.delivery), broadlogId: BroadlogID(item.broadlog), action: .click, channel: .push,
                platform: .android, eventTime: clock - 5_000 + Int64(number * 37), shape: .androidPush)
            withBytes(item.original) { original in
                let delivery = writer.number(of: event.deliveryId)
                writer.append(
                    event, delivery: delivery, eventTime: event.eventTime!, sourcePartition: item.source, epoch: item.epoch, sourceOffset: item.offset,
                    timestamp: clock - 1_000,
                    original: original.map { RepartitionRecord.OriginalBytes(key: $0, value: $0, timestamp: clock - 1_000, maxBytes: maxOriginalBytes) },
                    watermark: clock - 10_000 + item.offset)
            }
        }
        // The record begins the group's records of its first event's source.
        writer.settleSources { source, _, begins in begins = begins || source == events.first?.source }
        writer.finish()
        return Array(writer.bytes[0..<writer.end])
    }

    static func withBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }

    /// `value` decoded by the aggregate stage's input as record 2 at offset 40 of partition 0.
    static func decoded(_ value: [UInt8]) -> DecodedBatch {
        let arena = RecordArena()
        var batch = DecodedBatch()
        RepartitionInput(partitionCount: 1).decode(arena.record(partition: 0, offset: 40, value: value), at: 2, into: &batch)
        return batch
    }

    /// The batch's events are the record's, read whole, in order and field by field.
    static func expectSameEvents(_ value: [UInt8]) throws {
        let batch = decoded(value)
        #expect(batch.rejections.isEmpty)
        try value.withUnsafeBytes { raw in
            guard case .events(let record) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            #expect(batch.events.count == record.events.count && batch.inputs.count == record.events.count)
            for (number, ((input, made), read)) in zip(zip(batch.inputs, batch.events), record.events).enumerated() {
                #expect(input.event == read.tracking(DeliveryID(read.deliveryId)))
                #expect(input.event.broadlogId == BroadlogID(read.broadlogId))
                #expect(input.partition == 0 && input.offset == 40 && input.tag == number)
                #expect(input.position == RecordPosition.of(offset: 40, event: number))
                #expect(made.source.partition == read.sourcePartition && made.sourceOffset == read.sourceOffset)
                #expect(made.carriesOriginal == (read.original != nil))
                #expect(made.reference == DeadLetterReference(record: 2, event: number))
            }
            #expect(Set(batch.firstSightings.keys.map(\.partition)) == Set(record.marks.map(\.source)))
        }
    }

    @Test("events of several sources, in runs that come back to a source already named, read as the whole record reads them")
    func severalSources() throws {
        let sources: [Int32] = [3, 3, 0, 7, 3, 0, 0, 5, 7]
        try Self.expectSameEvents(
            Self.record(sources.enumerated().map { Written(delivery: "d\($0 % 3)", broadlog: "b\($0)", source: $1, offset: Int64(100 + $0)) }))
    }

    @Test("originals, whole and cut, travel beside events without one; ids longer than sixteen bytes and not ASCII read as the whole record reads them")
    func originals() throws {
        let large = Array(repeating: UInt8(ascii: "x"), count: 3_000)
        try Self.expectSameEvents(
            Self.record(
                [
                    Written(delivery: "d1", broadlog: "b1", source: 1, offset: 0, original: Array("{}".utf8)),
                    Written(delivery: "d1", broadlog: "b2", source: 1, offset: 1),
                    Written(delivery: "a-delivery-id-longer-than-16", broadlog: "a-broadlog-longer-than-16", source: 2, offset: 9, original: large),
                    Written(delivery: "dé", broadlog: "bé-ü", source: 2, offset: 10),
                ], maxOriginalBytes: 1_024))
    }

    @Test("more deliveries than a head byte holds (31) name the rest by a varint, and read as the whole record reads them")
    func manyDeliveries() throws {
        try Self.expectSameEvents(Self.record((0..<80).map { Written(delivery: "d\($0)", broadlog: "b\($0)", source: 2, offset: Int64($0)) }))
    }

    @Test("a marks record notes its sources and adds no events")
    func marks() throws {
        var bytes: [UInt8] = []
        RepartitionRecord.encodeMarks(
            [SourceMark(source: 1, watermark: Self.clock - 9, idle: false), SourceMark(source: 4, watermark: nil, idle: true, quietSince: Self.clock - 3)],
            epochs: [1, 2], begins: [true, false], origin: Self.origin, writerClock: Self.clock, into: &bytes)
        let batch = Self.decoded(bytes)
        #expect(batch.events.isEmpty && batch.rejections.isEmpty && batch.markRecords == 1)
        #expect(Set(batch.firstSightings.keys.map(\.partition)) == [1, 4])
        #expect(batch.firstSightings.values.filter(\.begins).count == 1)
    }

    @Test("an event without its delivery id is refused on its own; the record's other events are counted")
    func emptyDeliveryId() throws {
        let value = Self.record([
            Written(delivery: "d1", broadlog: "b1", source: 1, offset: 0), Written(delivery: "", broadlog: "b2", source: 1, offset: 1),
            Written(delivery: "d1", broadlog: "b3", source: 1, offset: 2),
        ])
        let batch = Self.decoded(value)
        #expect(batch.events.map(\.reference.event) == [0, 2])
        #expect(batch.inputs.map(\.tag) == [0, 1] && batch.inputs.map(\.event.broadlogId) == ["b1", "b3"])
        #expect(batch.rejections.map(\.detail) == ["an event without its delivery id"])
        #expect(batch.rejections.map(\.reference) == [DeadLetterReference(record: 2, event: 1)])
    }

    @Test("a record whose later event cannot be read is refused whole, with the error the whole record's reading gives: the events read before it are taken back")
    func unreadableLaterEvent() throws {
        var value = Self.record((0..<6).map { Written(delivery: "d\($0)", broadlog: "b\($0)", source: 1, offset: Int64($0)) })
        // The last event's head: its action bits set to 3, which no action has. Its broadlog
        // id is its last field, after head, shape, one byte of each delta and the id's length.
        var lastHead = 0
        value.withUnsafeBytes { raw in
            guard case .events(let record)? = try? RepartitionRecord.decode(raw), let event = record.events.last else { return }
            lastHead = event.broadlogId.baseAddress! - raw.baseAddress! - 5
        }
        value[lastHead] |= 3
        let expected = try #require(throws: RepartitionRecord.DecodingError.self) { try value.withUnsafeBytes { _ = try RepartitionRecord.decode($0) } }
        let batch = Self.decoded(value)
        #expect(batch.events.isEmpty && batch.inputs.isEmpty)
        #expect(batch.rejections.map(\.detail) == ["\(expected); only trackpipe should write to the repartition topic"])
        #expect(batch.rejections.map(\.reference) == [DeadLetterReference(record: 2)])
        #expect(batch.firstSightings.isEmpty && batch.writerClock == nil)
    }

    @Test("records decoded in chunks and joined tag each input with its index in the joined batch, as records decoded in one go do")
    func joinedChunks() throws {
        let arena = RecordArena()
        let input = RepartitionInput(partitionCount: 1)
        let records = (0..<3).map { record in
            arena.record(
                partition: 0, offset: Int64(40 + record),
                value: Self.record((0..<5).map { Written(delivery: "d\($0)", broadlog: "b\(record)-\($0)", source: 1, offset: Int64(10 * record + $0)) }))
        }
        let whole = input.decode(records, at: 0..<3)
        var joined = input.decode(records, at: 0..<1)
        joined.append(input.decode(records, at: 1..<3))
        #expect(joined.inputs == whole.inputs && whole.inputs.map(\.tag) == Array(0..<15))
        #expect(joined.events.map(\.reference) == whole.events.map(\.reference))
    }
}
