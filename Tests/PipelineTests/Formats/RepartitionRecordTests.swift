import Testing
import TrackingDomain
@testable import Pipeline

/// The events record format as the normalize stage writes it: events written into a buffer
/// kept from batch to batch, and single events read back for dead letters.
@Suite("Repartition records")
struct RepartitionRecordTests {
    static let source = RepartitionRecord.Source(topic: "hits", partitions: 8, routedPartitions: 4)

    func event(_ delivery: String, _ broadlog: String) -> TrackingEvent {
        TrackingEvent(
            deliveryId: delivery, broadlogId: broadlog, action: .click, channel: .push, platform: .ios, eventTime: 1_000,
            shape: .iosPush)
    }

    /// Writes each event at the start of the same buffer, as a lane does batch after batch, and
    /// gathers them into one record.
    func record(_ events: [(TrackingEvent, key: [UInt8]?, value: [UInt8]?)]) -> [UInt8] {
        var buffer: [UInt8] = []
        var batch = RepartitionRecord.EventBatch()
        for (offset, item) in events.enumerated() {
            let end = Self.withOptional(item.key) { key in
                Self.withOptional(item.value) { value in
                    RepartitionRecord.writeEvent(
                        item.0, eventTime: 1_000 + Int64(offset), sourcePartition: 3, sourceEpoch: 0, sourceOffset: Int64(offset),
                        sourceWatermark: 0, originalTimestamp: offset == 0 ? nil : 2_000, originalKey: key, originalValue: value,
                        into: &buffer, at: 0)
                }
            }
            buffer.withUnsafeMutableBytes { raw in
                RepartitionRecord.setSourceFacts(watermark: 500 + Int64(offset), epoch: 2, ofEventAt: 0, in: raw)
            }
            buffer.withUnsafeBytes { batch.append(encodedEvent: UnsafeRawBufferPointer(rebasing: $0[0..<end]), timestamp: 2_000, source: Self.source) }
        }
        var bytes: [UInt8] = []
        batch.take { value, _ in bytes = Array(value) }
        return bytes
    }

    static func withOptional<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }

    @Test("an event written over a longer one in a reused buffer reads back as written, nothing of the other left")
    func reusedBuffer() throws {
        let long = [UInt8](repeating: UInt8(ascii: "x"), count: 300)
        let bytes = record([
            (event("d-long-delivery", "b-long-broadlog"), key: Array("a key".utf8), value: long),
            (event("d1", "b1"), key: nil, value: []),
        ])
        let decoded = try bytes.withUnsafeBytes { raw -> [(String, String, Int64, Int64, UInt32, Int64?, [UInt8]?, [UInt8]?)] in
            guard case .events(let events) = try RepartitionRecord.decode(raw) else { return [] }
            return events.map {
                (
                    String(decoding: $0.deliveryId, as: UTF8.self), String(decoding: $0.broadlogId, as: UTF8.self), $0.sourceOffset,
                    $0.sourceWatermark, $0.sourceEpoch, $0.originalTimestamp, $0.originalKey.map { Array($0) },
                    $0.originalValue.map { Array($0) }
                )
            }
        }
        #expect(decoded.count == 2)
        #expect(decoded[0].0 == "d-long-delivery" && decoded[0].1 == "b-long-broadlog")
        #expect(decoded[0].2 == 0 && decoded[0].3 == 500 && decoded[0].4 == 2 && decoded[0].5 == nil)
        #expect(decoded[0].6 == Array("a key".utf8) && decoded[0].7 == long)
        #expect(decoded[1].0 == "d1" && decoded[1].1 == "b1")
        #expect(decoded[1].2 == 1 && decoded[1].3 == 501 && decoded[1].5 == 2_000)
        #expect(decoded[1].6 == nil, "no key stays no key")
        #expect(decoded[1].7 == [], "an empty value stays empty, not absent")
    }

    @Test("one event read for a dead letter is the same as that event of the whole record")
    func singleEvent() throws {
        let bytes = record((0..<5).map { (event("d\($0)", "b\($0)"), key: Array("k\($0)".utf8), value: Array("v\($0)".utf8)) })
        try bytes.withUnsafeBytes { raw in
            guard case .events(let all) = try RepartitionRecord.decode(raw) else {
                Issue.record("not an events record")
                return
            }
            for number in all.indices {
                let one = try #require(try RepartitionRecord.event(number, in: raw))
                #expect(one.sourceOffset == all[number].sourceOffset)
                #expect(one.originalValue.map { Array($0) } == all[number].originalValue.map { Array($0) })
                #expect(one.originalKey.map { Array($0) } == Array("k\(number)".utf8))
            }
            #expect(try RepartitionRecord.event(5, in: raw) == nil, "past the last event")
        }
    }

    @Test("an event that leaves its original in the input records only the lengths, a key-less message staying key-less, and is shorter by the bytes")
    func leftInInput() throws {
        let value = Array(repeating: UInt8(ascii: "v"), count: 180)
        var buffer: [UInt8] = []
        var ends: [Int] = []
        for (key, carries) in [(Array("a key".utf8) as [UInt8]?, false), (nil, false), (Array("a key".utf8), true)] {
            let end = Self.withOptional(key) { key in
                value.withUnsafeBytes { value in
                    RepartitionRecord.writeEvent(
                        event("d1", "b1"), eventTime: 1_000, sourcePartition: 0, sourceEpoch: 0, sourceOffset: 7, sourceWatermark: 0,
                        originalTimestamp: 2_000, originalKey: key, originalValue: value, carriesOriginal: carries, into: &buffer, at: 0)
                }
            }
            ends.append(end)
            var batch = RepartitionRecord.EventBatch()
            buffer.withUnsafeBytes { batch.append(encodedEvent: UnsafeRawBufferPointer(rebasing: $0[0..<end]), timestamp: 2_000, source: Self.source) }
            var bytes: [UInt8] = []
            batch.take { record, _ in bytes = Array(record) }
            try bytes.withUnsafeBytes { raw in
                let decoded = try #require(try RepartitionRecord.event(0, in: raw))
                #expect(decoded.sourceOffset == 7 && decoded.originalTimestamp == 2_000)
                if carries {
                    #expect(decoded.leftInInput == nil && decoded.originalValue.map { Array($0) } == value)
                } else {
                    #expect(decoded.originalKey == nil && decoded.originalValue == nil)
                    #expect(decoded.leftInInput == RepartitionRecord.OriginalShape(keyLength: key?.count, valueLength: 180))
                }
            }
        }
        #expect(ends[2] - ends[0] == 5 + 180, "carried, the key and value bytes; left, none")
    }
}
