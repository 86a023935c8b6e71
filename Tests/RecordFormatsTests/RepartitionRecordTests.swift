import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import RecordFormats

/// The repartition record format as the normalize stage writes it: events written straight into
/// a record by a writer kept from batch to batch, deltas and tables, originals only where given,
/// and records read back whole or one event at a time for dead letters.
@Suite("Repartition records")
struct RepartitionRecordTests {
    static let origin = RepartitionRecord.Origin(sourceTopic: "hits", sourcePartitions: 8, routedPartitions: 4, group: "g")
    static let clock: Int64 = 1_795_300_000_000

    struct Written {
        var event: TrackingEvent
        var source: Int32 = 3
        var epoch: UInt32 = 2
        var offset: Int64
        var key: [UInt8]? = nil
        var value: [UInt8]? = nil
        var timestamp: Int64? = nil
        /// Whether the original travels.
        var carries = false
    }

    static func event(_ delivery: String, _ broadlog: String, at time: Int64 = clock - 5_000, action: HitAction = .click) -> TrackingEvent {
        TrackingEvent(
            deliveryId: DeliveryID(delivery), broadlogId: BroadlogID(broadlog), action: action, channel: .push, platform: .ios, eventTime: time, shape: .iosPush)
    }

    /// One record of `events`, each source's watermark set to 500 plus its last event's offset;
    /// written by `writer` (begun afresh), so that a writer can be reused from record to record.
    static func record(_ events: [Written], writer: inout RepartitionRecord.EventsWriter, maxOriginalBytes: Int = .max) -> [UInt8] {
        writer.begin(partition: 1, origin: origin, writerClock: clock)
        for item in events {
            withOptional(item.key) { key in
                withOptional(item.value) { value in
                    let delivery = writer.number(of: item.event.deliveryId)
                    writer.append(
                        item.event, delivery: delivery, eventTime: item.event.eventTime!, sourcePartition: item.source, epoch: item.epoch,
                        sourceOffset: item.offset, timestamp: item.timestamp,
                        original: item.carries
                            ? RepartitionRecord.OriginalBytes(key: key, value: value, timestamp: item.timestamp, maxBytes: maxOriginalBytes)
                            : nil,
                        watermark: 500 + item.offset)
                }
            }
        }
        let estimate = writer.size
        writer.finish()
        #expect(writer.end <= estimate, "the size a lane closes records by is never below what the record takes")
        return Array(writer.bytes[0..<writer.end])
    }

    static func record(_ events: [Written], maxOriginalBytes: Int = .max) -> [UInt8] {
        var writer = RepartitionRecord.EventsWriter()
        return record(events, writer: &writer, maxOriginalBytes: maxOriginalBytes)
    }

    static func withOptional<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }

    /// Reads `bytes` back as an events record for `body`: its views live as long as the call.
    static func withDecoded(_ bytes: [UInt8], _ body: (RepartitionRecord.Events) throws -> Void) throws {
        try bytes.withUnsafeBytes { raw in
            guard case .events(let record) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            try body(record)
        }
    }

    @Test("every field of every event reads back as written: deltas of offsets and times in both directions, the delivery table shared, the source table in order of first appearance with epochs and last watermarks, the writer's clock")
    func roundTrip() throws {
        let events = [
            Written(event: Self.event("d1", "b1", at: Self.clock - 70_000), source: 5, epoch: 50, offset: 1_000_000_007),
            Written(event: Self.event("d2", "b-second", at: Self.clock - 1, action: .open), source: 5, epoch: 50, offset: 1_000_000_009),
            Written(event: Self.event("d1", "b3", at: Self.clock + 3_600_000), source: 1, epoch: 10, offset: 0),
            Written(event: Self.event("d1", "b4", at: -86_400_000), source: 1, epoch: 10, offset: 1),
            Written(event: Self.event("d3", "b5", at: Self.clock), source: 5, epoch: 50, offset: 1_000_000_010),
            Written(event: Self.event("d2", "b6", at: Self.clock, action: .impression), source: 2, epoch: 20, offset: 7),
        ]
        let bytes = Self.record(events)
        try bytes.withUnsafeBytes { raw in
            guard case .events(let record) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            #expect(record.origin == Self.origin && record.writerClock == Self.clock)
            #expect(record.deliveries.map { String(decoding: $0, as: UTF8.self) } == ["d1", "d2", "d3"])
            #expect(record.events.count == events.count)
            for (read, written) in zip(record.events, events) {
                #expect(read.sourcePartition == written.source && read.sourceOffset == written.offset)
                #expect(read.eventTime == written.event.eventTime)
                #expect(DeliveryID(read.deliveryId) == written.event.deliveryId)
                #expect(BroadlogID(read.broadlogId) == written.event.broadlogId)
                #expect(read.action == written.event.action && read.channel == written.event.channel)
                #expect(read.platform == written.event.platform && read.shape == written.event.shape)
                #expect(read.original == nil, "no original unless one was given")
            }
            #expect(
                record.marks == [
                    SourceMark(source: 5, watermark: 500 + 1_000_000_010, idle: false), SourceMark(source: 1, watermark: 501, idle: false),
                    SourceMark(source: 2, watermark: 507, idle: false),
                ])
            #expect(record.epochs == [50, 10, 20])
        }
    }

    @Test("an event without its original costs about its broadlog id plus half a dozen bytes; one with its original carries key, value and timestamp exactly: no key stays no key, an empty value stays empty, no timestamp stays none")
    func originals() throws {
        let plain = Self.record((0..<100).map { Written(event: Self.event("d1", "h\(100_000 + $0)"), offset: Int64($0)) })
        let perEvent = Double(plain.count - Self.record([]).count) / 100
        #expect(perEvent < 7 + 7, "\(perEvent) bytes per event with a broadlog id of 7 bytes")
        let value = Array("{\"deliveryId\":\"d1\"}".utf8)
        let bytes = Self.record([
            Written(event: Self.event("d1", "b1"), offset: 0, key: Array("a key".utf8), value: value, timestamp: Self.clock - 2_000, carries: true),
            Written(event: Self.event("d1", "b2"), offset: 1, key: nil, value: [], timestamp: nil, carries: true),
            Written(event: Self.event("d1", "b3"), offset: 2, key: [0, 0xFF], value: nil, timestamp: 0, carries: true),
            Written(event: Self.event("d1", "b4"), offset: 3, key: Array("other".utf8), value: value, timestamp: 9),
        ])
        try Self.withDecoded(bytes) { record in
        let originals = record.events.map(\.original)
        #expect(originals[0].flatMap(\.key).map { Array($0) } == Array("a key".utf8))
        #expect(originals[0].flatMap(\.value).map { Array($0) } == value)
        #expect(originals[0]?.timestamp == Self.clock - 2_000)
        #expect(originals[1] != nil && originals[1]!.key == nil, "no key stays no key")
        #expect(originals[1]!.value.map { Array($0) } == [], "an empty value stays empty, not absent")
        #expect(originals[1]!.timestamp == nil)
        #expect(originals[2]!.key.map { Array($0) } == [0, 0xFF] && originals[2]!.value == nil && originals[2]!.timestamp == 0)
        #expect(originals[3] == nil, "an original not given does not travel")
        #expect(originals.compactMap { $0 }.allSatisfy { $0.cut.isEmpty })
        }
    }

    @Test("a writer reused for a record of fewer, shorter events leaves nothing of the previous record: its tables, deltas and sources start afresh")
    func reusedWriter() throws {
        var writer = RepartitionRecord.EventsWriter()
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: 300)
        _ = Self.record(
            (0..<40).map { Written(event: Self.event("d\($0)", "b-long-broadlog-\($0)"), source: Int32($0 % 3), offset: 100 + Int64($0), value: long, carries: true) },
            writer: &writer)
        let bytes = Self.record([Written(event: Self.event("d9", "b1"), source: 7, epoch: 0, offset: 9)], writer: &writer)
        #expect(bytes == Self.record([Written(event: Self.event("d9", "b1"), source: 7, epoch: 0, offset: 9)]), "the same bytes as a fresh writer's")
        try Self.withDecoded(bytes) { record in
            #expect(record.events.count == 1 && record.events[0].sourceOffset == 9 && record.events[0].sourcePartition == 7)
            #expect(record.marks == [SourceMark(source: 7, watermark: 509, idle: false)] && record.epochs == [0])
            #expect(record.deliveries.count == 1)
        }
    }

    @Test("a record of many deliveries: indices past the five bits of the event's second byte, and a table searched by hash past 16, read back right")
    func manyDeliveries() throws {
        let events = (0..<300).map { Written(event: Self.event("delivery-\($0 % 97)", "b\($0)"), offset: Int64($0)) }
        try Self.withDecoded(Self.record(events)) { record in
            #expect(record.deliveries.count == 97)
            #expect(record.events.map { DeliveryID($0.deliveryId) } == events.map(\.event.deliveryId))
            #expect(record.events.map(\.delivery) == (0..<300).map { $0 % 97 })
        }
    }

    @Test("deliveries numbered by the caller (as a lane remembers them, from number(of:)) give the very bytes of a writer asked for the number of every event, over sources coming back in one record and more than 16 deliveries")
    func numbersGivenByTheCaller() throws {
        let sources: [Int32] = [5, 5, 3, 5, 7, 7, 3, 3, 5, 9]
        let events = (0..<400).map { (index: Int) -> Written in
            let delivery = index % 5 == 0 ? "a-delivery-longer-than-sixteen-\(index % 31)" : "d\(index % 23)"
            let source = sources[index / 40]
            return Written(
                event: Self.event(delivery, "b\(index)", at: Self.clock - Int64(index * 37 % 900)), source: source, epoch: UInt32(source),
                offset: Int64(index * 3 % 1_000), carries: index % 50 == 0)
        }
        var writer = RepartitionRecord.EventsWriter()
        writer.begin(partition: 1, origin: Self.origin, writerClock: Self.clock)
        var numbers: [DeliveryID: Int] = [:]
        for item in events {
            let number: Int
            if let known = numbers[item.event.deliveryId] { number = known } else {
                number = writer.number(of: item.event.deliveryId)
                numbers[item.event.deliveryId] = number
            }
            #expect(writer.number(of: item.event.deliveryId) == number, "asked again, the same number")
            writer.append(
                item.event, delivery: number, eventTime: item.event.eventTime!, sourcePartition: item.source, epoch: item.epoch,
                sourceOffset: item.offset, timestamp: nil, original: item.carries ? RepartitionRecord.OriginalBytes(key: nil, value: nil, timestamp: Self.clock) : nil,
                watermark: 500 + item.offset)
        }
        writer.finish()
        let bytes = Array(writer.bytes[0..<writer.end])
        var plain = RepartitionRecord.EventsWriter()
        plain.begin(partition: 1, origin: Self.origin, writerClock: Self.clock)
        for item in events {
            let delivery = plain.number(of: item.event.deliveryId)
            plain.append(
                item.event, delivery: delivery, eventTime: item.event.eventTime!, sourcePartition: item.source, epoch: item.epoch, sourceOffset: item.offset,
                timestamp: nil, original: item.carries ? RepartitionRecord.OriginalBytes(key: nil, value: nil, timestamp: Self.clock) : nil,
                watermark: 500 + item.offset)
        }
        plain.finish()
        #expect(bytes == Array(plain.bytes[0..<plain.end]))
        try Self.withDecoded(bytes) { record in
            #expect(record.events.map { DeliveryID($0.deliveryId) } == events.map(\.event.deliveryId))
            #expect(record.events.map(\.sourceOffset) == events.map(\.offset))
            #expect(record.events.map(\.sourcePartition) == events.map(\.source))
            #expect(record.marks.map(\.source) == [5, 3, 7, 9])
            for mark in record.marks {
                #expect(mark.watermark == 500 + events.last { $0.source == mark.source }!.offset, "source \(mark.source): its last event's")
            }
        }
    }

    @Test("broadlog ids of every length from 0 to 40 (inline as words or spilled), in ASCII or not, with or without an original after them, read back exactly")
    func broadlogsOfEveryLength() throws {
        let events = (0...40).flatMap { length -> [Written] in
            let ascii = String((0..<length).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) })
            let other = length == 0 ? "" : "é" + String(ascii.dropFirst(min(2, length)))
            return [
                Written(event: Self.event("d\(length % 3)", ascii), offset: Int64(4 * length)),
                Written(event: Self.event("d1", other), offset: Int64(4 * length + 1), key: [1], value: [2, 3], timestamp: Self.clock, carries: true),
                Written(event: Self.event("d2", ascii), offset: Int64(4 * length + 2), carries: true),
            ]
        }
        try Self.withDecoded(Self.record(events)) { record in
            #expect(record.events.map { BroadlogID($0.broadlogId) } == events.map(\.event.broadlogId))
            #expect(record.events.map { $0.original.map { [UInt8]($0.value ?? UnsafeRawBufferPointer(start: nil, count: 0)) } } == events.map { $0.carries ? $0.value ?? [] : nil })
            #expect(record.events.map { $0.original?.key.map(Array.init) } == events.map { $0.carries ? $0.key : nil })
        }
    }

    @Test("a source's watermark settled in the middle of a record is kept unless a later event of the source moves it, whichever source the record is in")
    func settledThenAppended() throws {
        var writer = RepartitionRecord.EventsWriter()
        writer.begin(partition: 1, origin: Self.origin, writerClock: Self.clock)
        func append(_ source: Int32, _ offset: Int64) {
            let event = Self.event("d1", "b\(offset)")
            let delivery = writer.number(of: event.deliveryId)
            writer.append(
                event, delivery: delivery, eventTime: Self.clock - 5_000, sourcePartition: source, epoch: 1, sourceOffset: offset,
                timestamp: nil, original: nil, watermark: 500 + offset)
        }
        append(1, 10)
        append(2, 20)
        writer.settleSources { source, watermark, begins in
            watermark = 7_000 + Int64(source)
            begins = source == 2
        }
        append(2, 21)
        append(3, 30)
        writer.finish()
        try Self.withDecoded(Array(writer.bytes[0..<writer.end])) { record in
            #expect(record.marks.map(\.source) == [1, 2, 3])
            #expect(record.marks.map(\.watermark) == [7_001, 521, 530])
            #expect(record.begins == [false, true, false])
            #expect(record.events.map(\.sourceOffset) == [10, 20, 21, 30])
        }
    }

    @Test("one event read for a dead letter is that event of the whole record, original included; past the last there is none")
    func singleEvent() throws {
        let bytes = Self.record((0..<5).map {
            Written(event: Self.event("d\($0)", "b\($0)"), offset: Int64($0), key: Array("k\($0)".utf8), value: Array("v\($0)".utf8), carries: $0 % 2 == 0)
        })
        try bytes.withUnsafeBytes { raw in
            guard case .events(let all) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            for number in all.events.indices {
                let one = try #require(try RepartitionRecord.event(number, in: raw))
                #expect(one.sourceOffset == all.events[number].sourceOffset)
                #expect(one.original.flatMap(\.value).map { Array($0) } == (number % 2 == 0 ? Array("v\(number)".utf8) : nil))
                #expect(one.original.flatMap(\.key).map { Array($0) } == (number % 2 == 0 ? Array("k\(number)".utf8) : nil))
            }
            #expect(try RepartitionRecord.event(5, in: raw) == nil, "past the last event")
        }
    }

    @Test("an original larger than the bound travels cut as its dead letter would be: its first bytes, and its sizes and SHA-256 as DeadLetterCut's headers")
    func largeOriginalCut() throws {
        let key = Array("device-key".utf8)
        let value = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let bytes = Self.record(
            [
                Written(event: Self.event("d1", "b1"), offset: 0, key: key, value: value, carries: true),
                Written(event: Self.event("d2", "b2"), offset: 1, key: key, value: Array("small".utf8), carries: true),
            ], maxOriginalBytes: 4_096)
        #expect(bytes.count < 4_096 + 1_000, "the record holds the cut original, not the whole")
        try Self.withDecoded(bytes) { record in
        let cut = try #require(record.events[0].original)
        let expected = try #require(
            key.withUnsafeBytes { key in value.withUnsafeBytes { value in DeadLetterCut.fitting(key: key, value: value, headers: [], limit: 4_096) } })
        #expect(cut.key.map { Array($0) } == Array(key.prefix(expected.keyBytes)))
        #expect(cut.value.map { Array($0) } == Array(value.prefix(expected.valueBytes)))
        #expect(try RepartitionRecord.cutHeaders(cut.cut) == expected.headers)
        #expect(expected.headers.contains(KafkaHeader(key: DeadLetterCut.Header.valueSize, string: "20000")))
        let whole = try #require(record.events[1].original)
        #expect(whole.cut.isEmpty && whole.value.map { Array($0) } == Array("small".utf8))
        }
    }

    @Test("marks: each source's watermark (or none), idleness and since when it is quiet (if said), with its epoch, relative to the writer's clock, which reads back")
    func marks() throws {
        var bytes: [UInt8] = []
        let marks = [
            SourceMark(source: 0, watermark: Self.clock - 3_000, idle: false),
            SourceMark(source: 7, watermark: nil, idle: true, quietSince: Self.clock - 40_000),
            SourceMark(source: 399, watermark: 12, idle: true),
        ]
        RepartitionRecord.encodeMarks(marks, epochs: [0, 3, 70_000], origin: Self.origin, writerClock: Self.clock, into: &bytes)
        try bytes.withUnsafeBytes { raw in
            guard case .marks(let record) = try RepartitionRecord.decode(raw) else {
                Issue.record("not a marks record")
                return
            }
            #expect(record.marks == marks && record.epochs == [0, 3, 70_000])
            #expect(record.writerClock == Self.clock && record.origin == Self.origin)
        }
        #expect(bytes.count < 48, "\(bytes.count) bytes for three sources (and the topic's and the group's names)")
    }

    @Test("the event count read from an events record's header alone is its events'; a marks record, or bytes cut or of another version, count none or no more than their bytes could hold")
    func eventCount() throws {
        let bytes = Self.record((0..<40).map { Written(event: Self.event("d\($0 % 3)", "b\($0)"), source: Int32($0 % 2), offset: Int64($0)) })
        try Self.withDecoded(bytes) { record in
            #expect(bytes.withUnsafeBytes { RepartitionRecord.eventCount(in: $0) } == record.events.count)
        }
        for length in 0..<bytes.count {
            let count = Array(bytes.prefix(length)).withUnsafeBytes { RepartitionRecord.eventCount(in: $0) }
            #expect(count == 0 || count <= length / 5, "cut to \(length) bytes")
        }
        var other = bytes
        other[0] = RepartitionRecord.version &+ 1
        #expect(other.withUnsafeBytes { RepartitionRecord.eventCount(in: $0) } == 0)
        var marks: [UInt8] = []
        RepartitionRecord.encodeMarks(
            [SourceMark(source: 0, watermark: Self.clock, idle: false)], epochs: [0], origin: Self.origin, writerClock: Self.clock, into: &marks)
        #expect(marks.withUnsafeBytes { RepartitionRecord.eventCount(in: $0) } == 0)
    }

    @Test("varints of one byte (read inline) and of more, up to the ten of UInt64.max, read back as written; an eleventh byte or bits past 64 are refused")
    func varints() {
        let values: [UInt64] = [0, 1, 0x7F, 0x80, 0x3FFF, 0x4000, UInt64(UInt32.max), UInt64.max >> 1, UInt64.max]
        var bytes: [UInt8] = []
        for value in values { Varint.append(value, to: &bytes) }
        #expect(bytes.count == 1 + 1 + 1 + 2 + 2 + 3 + 5 + 9 + 10)
        let read = bytes.withUnsafeBytes { raw -> [UInt64]? in
            var reader = ByteReader(bytes: raw)
            var read: [UInt64] = []
            for _ in values {
                guard let value = try? reader.varint() else { return nil }
                read.append(value)
            }
            return reader.isAtEnd ? read : nil
        }
        #expect(read == values)
        for malformed: [UInt8] in [Array(repeating: 0x80, count: 10) + [0], Array(repeating: 0xFF, count: 9) + [2], [0x80], []] {
            malformed.withUnsafeBytes { raw in
                var reader = ByteReader(bytes: raw)
                #expect(throws: RepartitionRecord.DecodingError.self) { _ = try reader.varint() }
            }
        }
    }

    @Test("a record cut anywhere, or of another version or kind, is refused with an error, never read as something else")
    func malformed() throws {
        let bytes = Self.record(
            (0..<6).map { Written(event: Self.event("d\($0 % 2)", "b\($0)"), source: Int32($0 % 3), offset: Int64($0), value: [1, 2, 3], carries: $0 == 4) })
        for length in 0..<bytes.count {
            let cut = Array(bytes.prefix(length))
            #expect(throws: RepartitionRecord.DecodingError.self, "cut to \(length) bytes") {
                _ = try cut.withUnsafeBytes { try RepartitionRecord.decode($0) }
            }
        }
        var other = bytes
        other[0] = 5
        let error = try #require(throws: RepartitionRecord.DecodingError.self) { _ = try other.withUnsafeBytes { try RepartitionRecord.decode($0) } }
        #expect(error.writtenByAnotherVersion && error.description.contains("version 5"))
        var kind = bytes
        kind[1] = 9
        #expect(throws: RepartitionRecord.DecodingError.self) { _ = try kind.withUnsafeBytes { try RepartitionRecord.decode($0) } }
        let longer = bytes + [0]
        #expect(throws: RepartitionRecord.DecodingError.self) { _ = try longer.withUnsafeBytes { try RepartitionRecord.decode($0) } }
    }
}
