import Kafka
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import TrackpipeTestSupport

/// Owns byte buffers for `PolledRecord`s built in tests (records are views, as in Kafka).
final class RecordArena {
    private var buffers: [UnsafeMutableRawBufferPointer] = []

    func bytes(_ array: [UInt8]?) -> UnsafeRawBufferPointer? {
        guard let array else { return nil }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(array.count, 1), alignment: 1)
        buffer.copyBytes(from: array)
        buffers.append(buffer)
        return UnsafeRawBufferPointer(rebasing: buffer[0..<array.count])
    }

    func record(partition: Int32, offset: Int64, key: [UInt8]? = nil, value: [UInt8]?, timestamp: Int64? = nil) -> PolledRecord {
        PolledRecord(partition: partition, offset: offset, key: bytes(key), value: bytes(value), timestamp: timestamp, headerCount: .known(0))
    }

    func record(_ sent: RecordingSink.Sent, offset: Int64) -> PolledRecord {
        record(partition: sent.partition ?? 0, offset: offset, key: sent.key, value: sent.value, timestamp: sent.timestamp)
    }

    deinit { for buffer in buffers { buffer.deallocate() } }
}

/// Keeps copies of what a stage sends, by destination.
struct RecordingSink: RecordSink {
    struct Sent: Equatable {
        var destination: Destination
        var partition: Int32?
        var key: [UInt8]?
        var value: [UInt8]?
        var headers: [KafkaHeader]
        var timestamp: Int64?

        var keyText: String? { key.map { String(decoding: $0, as: UTF8.self) } }
        var header: [String: String] {
            Dictionary(headers.map { ($0.key, $0.stringValue ?? "") }, uniquingKeysWith: { $1 })
        }
    }

    var sent: [Sent] = []

    mutating func send(_ record: some OutgoingRecord) throws {
        let (key, value) = record.withBytes { key, value in (key.map { Array($0) }, value.map { Array($0) }) }
        sent.append(
            Sent(destination: record.destination, partition: record.partition, key: key, value: value, headers: record.headers, timestamp: record.timestamp))
    }

    func to(_ destination: Destination) -> [Sent] { sent.filter { $0.destination == destination } }

    /// Per state partition, the offset after the last state record sent (as if the state topic
    /// began empty and every send were acknowledged): what a runner hands `completeCommit`.
    var changelogEnds: [Int32: Int64] {
        sent.filter { $0.destination == .changelog }.reduce(into: [:]) { $0[$1.partition ?? 0, default: 0] += 1 }
    }

    mutating func take() -> [Sent] {
        defer { sent = [] }
        return sent
    }
}

extension Stage {
    /// Takes partitions: a stage that keeps no state reads none back.
    mutating func assignEmpty(_ starts: [PartitionStart], now: Int64) throws {
        try assign(starts, now: now)
    }

    /// A commit as the runner makes one of a stage that keeps no state, every record
    /// acknowledged as it is sent: what the commit points rely on, then the points, returned.
    @discardableResult
    mutating func commitAll(now: Int64, into sink: inout RecordingSink) throws -> [Int32: CommitPoint] {
        try prepareCommit(into: &sink)
        return commitPoints()
    }
}

extension StatefulStage {
    /// Takes partitions whose state topic holds nothing: each task's state is read back at once
    /// (there is none), so their records flow.
    mutating func assignEmpty(_ starts: [PartitionStart], now: Int64) throws {
        try assign(starts, now: now)
        for partition in partitionsAwaitingState { try stateRestored(partition: partition, now: now) }
    }

    /// Takes partitions whose state is what `state` sent to the state topic (in order, as the
    /// topic holds it), read back as the runner reads it.
    mutating func assignRestoring(_ starts: [PartitionStart], state: RecordingSink, now: Int64) throws {
        try assign(starts, now: now)
        let written = state.to(.changelog)
        for partition in partitionsAwaitingState {
            var offset: Int64 = 0
            var records: [StateRecord] = []
            for record in written where (record.partition ?? 0) == partition {
                records.append(StateRecord(offset: offset, key: record.key ?? [], value: record.value))
                offset += 1
            }
            if !records.isEmpty { restoreState(records, partition: partition) }
            try stateRestored(partition: partition, now: now)
        }
    }

    /// A commit as the runner makes one, every record acknowledged as it is sent: the state,
    /// then what was held until it was written (aggregate records, dead letters), then the
    /// commit points, returned.
    @discardableResult
    mutating func commitAll(now: Int64, into sink: inout RecordingSink) throws -> [Int32: CommitPoint] {
        try prepareCommit(into: &sink)
        try completeCommit(changelogEnds: sink.changelogEnds, now: now, into: &sink)
        let points = commitPoints()
        committed(points.keys.sorted())
        return points
    }
}

/// A raw hit of shape A.
func rawHit(_ delivery: String, _ broadlog: String, action: String = "7", at time: Int64) -> [UInt8] {
    Array("{\"deliveryId\":\"\(delivery)\",\"broadlogId\":\"\(broadlog)\",\"action\":\"\(action)\",\"timestamp\":\(time)}".utf8)
}

/// A repartition event copied out of its record's bytes, for assertions, with what its record
/// says of its source partition.
struct DecodedEvent {
    var sourcePartitions: Int
    var sourcePartition: Int32
    var sourceOffset: Int64
    /// The source partition's watermark in the record's table.
    var sourceWatermark: Int64?
    var eventTime: Int64
    /// The original's key and value ("" for none), nil when the event carries no original.
    var originalKey: String?
    var originalValue: String?

    init(_ event: RepartitionRecord.Event, of record: RepartitionRecord.Events) {
        sourcePartitions = record.origin.sourcePartitions
        sourcePartition = event.sourcePartition
        sourceOffset = event.sourceOffset
        sourceWatermark = record.marks.first { $0.source == event.sourcePartition }?.watermark
        eventTime = event.eventTime
        originalKey = event.original.map { $0.key.map { String(decoding: $0, as: UTF8.self) } ?? "" }
        originalValue = event.original.map { $0.value.map { String(decoding: $0, as: UTF8.self) } ?? "" }
    }
}
