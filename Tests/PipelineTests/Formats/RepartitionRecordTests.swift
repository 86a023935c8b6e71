import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline

/// The events record format as the normalize stage writes it: events written into a buffer
/// kept from batch to batch, the record's table of source partitions, and single events read
/// back for dead letters.
@Suite("Repartition records")
struct RepartitionRecordTests {
    static let origin = RepartitionRecord.Origin(sourceTopic: "hits", sourcePartitions: 8, routedPartitions: 4)

    func event(_ delivery: String, _ broadlog: String) -> TrackingEvent {
        TrackingEvent(
            deliveryId: delivery, broadlogId: broadlog, action: .click, channel: .push, platform: .ios, eventTime: 1_000,
            shape: .iosPush)
    }

    /// Writes each event at the start of the same buffer, as a lane does batch after batch, and
    /// gathers them into one record: event `i` of source partition 3 (epoch 2) at offset `i`,
    /// its source's watermark then 500 + i.
    func record(_ events: [(TrackingEvent, key: [UInt8]?, value: [UInt8]?)], maxOriginalBytes: Int = .max) -> [UInt8] {
        var buffer: [UInt8] = []
        var batch = RepartitionRecord.EventBatch()
        for (offset, item) in events.enumerated() {
            let end = Self.withOptional(item.key) { key in
                Self.withOptional(item.value) { value in
                    RepartitionRecord.writeEvent(
                        item.0, eventTime: 1_000 + Int64(offset), sourcePartition: 3, sourceOffset: Int64(offset),
                        originalTimestamp: offset == 0 ? nil : 2_000, originalKey: key, originalValue: value,
                        maxOriginalBytes: maxOriginalBytes, into: &buffer, at: 0)
                }
            }
            buffer.withUnsafeBytes {
                batch.append(
                    encodedEvent: UnsafeRawBufferPointer(rebasing: $0[0..<end]), timestamp: 2_000, origin: Self.origin,
                    sourcePartition: 3, epoch: 2, watermark: 500 + Int64(offset))
            }
        }
        var bytes: [UInt8] = []
        batch.take { value, _ in bytes = Array(value) }
        return bytes
    }

    static func withOptional<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }

    @Test("an event written over a longer one in a reused buffer reads back as written, nothing of the other left; the record names its source once, with its epoch and last watermark")
    func reusedBuffer() throws {
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: 300)
        let bytes = record([
            (event("d-long-delivery", "b-long-broadlog"), key: Array("a key".utf8), value: long),
            (event("d1", "b1"), key: nil, value: []),
        ])
        try bytes.withUnsafeBytes { raw in
            guard case .events(let record) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            #expect(record.origin == Self.origin)
            #expect(record.marks == [SourceMark(source: 3, watermark: 501, idle: false)] && record.epochs == [2])
            let events = record.events
            #expect(events.count == 2)
            #expect(String(decoding: events[0].deliveryId, as: UTF8.self) == "d-long-delivery")
            #expect(String(decoding: events[0].broadlogId, as: UTF8.self) == "b-long-broadlog")
            #expect(events[0].sourceOffset == 0 && events[0].eventTime == 1_000 && events[0].originalTimestamp == nil)
            #expect(events[0].originalKey.map { Array($0) } == Array("a key".utf8) && events[0].originalValue.map { Array($0) } == long)
            #expect(String(decoding: events[1].deliveryId, as: UTF8.self) == "d1" && String(decoding: events[1].broadlogId, as: UTF8.self) == "b1")
            #expect(events[1].sourceOffset == 1 && events[1].originalTimestamp == 2_000)
            #expect(events[1].originalKey == nil, "no key stays no key")
            #expect(events[1].originalValue.map { Array($0) } == [], "an empty value stays empty, not absent")
            #expect(events.allSatisfy { $0.originalCut.isEmpty })
        }
    }

    @Test("one event read for a dead letter is the same as that event of the whole record")
    func singleEvent() throws {
        let bytes = record((0..<5).map { (event("d\($0)", "b\($0)"), key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        try bytes.withUnsafeBytes { raw in
            guard case .events(let all) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            for number in all.events.indices {
                let one = try #require(try RepartitionRecord.event(number, in: raw))
                #expect(one.sourceOffset == all.events[number].sourceOffset)
                #expect(one.originalValue.map { Array($0) } == all.events[number].originalValue.map { Array($0) })
                #expect(one.originalKey.map { Array($0) } == Array("k\(number)".utf8))
            }
            #expect(try RepartitionRecord.event(5, in: raw) == nil, "past the last event")
        }
    }

    @Test("an original larger than the bound travels cut as its dead letter would be: its first bytes, and its sizes and SHA-256 as DeadLetterCut's headers")
    func largeOriginalCut() throws {
        let key = Array("device-key".utf8)
        let value = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let bytes = record([(event("d1", "b1"), key: key, value: value), (event("d2", "b2"), key: key, value: Array("small".utf8))], maxOriginalBytes: 4_096)
        #expect(bytes.count < 4_096 + 1_000, "the record holds the cut original, not the whole")
        try bytes.withUnsafeBytes { raw in
            let cutEvent = try #require(try RepartitionRecord.event(0, in: raw))
            let expected = try #require(
                key.withUnsafeBytes { key in value.withUnsafeBytes { value in DeadLetterCut.fitting(key: key, value: value, headers: [], limit: 4_096) } })
            #expect(cutEvent.originalKey.map { Array($0) } == Array(key.prefix(expected.keyBytes)))
            #expect(cutEvent.originalValue.map { Array($0) } == Array(value.prefix(expected.valueBytes)))
            #expect(try RepartitionRecord.cutHeaders(cutEvent.originalCut) == expected.headers)
            #expect(expected.headers.contains(KafkaHeader(key: DeadLetterCut.Header.valueSize, string: "20000")))
            let whole = try #require(try RepartitionRecord.event(1, in: raw))
            #expect(whole.originalCut.isEmpty && whole.originalValue.map { Array($0) } == Array("small".utf8))
        }
    }

    @Test("events of several source partitions: the table lists each once, with its epoch and the watermark as of its last event in the record")
    func sourceTable() throws {
        var buffer: [UInt8] = []
        var batch = RepartitionRecord.EventBatch()
        for (index, source) in [Int32(5), 5, 1, 1, 5, 2].enumerated() {
            let end = RepartitionRecord.writeEvent(
                event("d", "b\(index)"), eventTime: 1_000, sourcePartition: source, sourceOffset: Int64(index), originalTimestamp: nil,
                originalKey: nil, originalValue: nil, into: &buffer, at: 0)
            buffer.withUnsafeBytes {
                batch.append(
                    encodedEvent: UnsafeRawBufferPointer(rebasing: $0[0..<end]), timestamp: nil, origin: Self.origin,
                    sourcePartition: source, epoch: UInt32(source) * 10, watermark: 100 * Int64(index))
            }
        }
        var bytes: [UInt8] = []
        batch.take { value, _ in bytes = Array(value) }
        try bytes.withUnsafeBytes { raw in
            guard case .events(let record) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            #expect(record.events.map(\.sourcePartition) == [5, 5, 1, 1, 5, 2])
            #expect(
                record.marks == [
                    SourceMark(source: 5, watermark: 400, idle: false), SourceMark(source: 1, watermark: 300, idle: false),
                    SourceMark(source: 2, watermark: 500, idle: false),
                ])
            #expect(record.epochs == [50, 10, 20])
        }
        // The batch starts afresh after it is taken: a new record has a table of its own.
        let end = RepartitionRecord.writeEvent(
            event("d", "b"), eventTime: 1_000, sourcePartition: 7, sourceOffset: 9, originalTimestamp: nil, originalKey: nil,
            originalValue: nil, into: &buffer, at: 0)
        buffer.withUnsafeBytes {
            batch.append(
                encodedEvent: UnsafeRawBufferPointer(rebasing: $0[0..<end]), timestamp: nil, origin: Self.origin, sourcePartition: 7,
                epoch: 0, watermark: 9)
        }
        batch.take { value, _ in bytes = Array(value) }
        try bytes.withUnsafeBytes { raw in
            guard case .events(let record) = try RepartitionRecord.decode(raw) else { return }
            #expect(record.marks == [SourceMark(source: 7, watermark: 9, idle: false)] && record.epochs == [0])
        }
    }
}
