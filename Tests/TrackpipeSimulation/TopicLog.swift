import Kafka
import Pipeline

/// Who wrote a record and when: the checks need to know whether a stage that writes the output
/// had crashed before a record was sent, and the trace names the writer.
struct WriteStamp: Sendable {
    /// Simulated wall-clock ms of the write.
    var time: Int64
    /// Index into `World.writers` ("a1#2": the aggregate stage of instance 1, second life); -1
    /// for the hit producer.
    var writer: Int
    /// Crashes of output-writing stages before this write.
    var outputCrashes: Int
    /// Which run of the workers wrote it: a new group (or a group whose offsets were reset for
    /// a recount) counts the input again from its beginning, and is judged on its own.
    var generation: Int = 1
}

/// One topic of the in-memory cluster: per partition an append-only log. A topic loses records
/// two ways, as Kafka's do: the log cleaner of a compacted topic (the state topic) removes older
/// values of a key and old tombstones, keeping their offsets; and a partition's log start moves
/// up, everything below it gone (`deleteRecords`), as retention (or a size limit) deletes the
/// oldest records and as DeleteRecords (a purge) asks. Some offsets are never records a consumer
/// is handed: a transactional producer's commit markers, and records compaction removed before
/// anyone read them (`appendUndelivered`).
///
/// The bytes of every record live in one growing buffer. A simulated consumer hands a batch out
/// as records held in memory (`HeldRecord`), which the runner shows the stage as views valid for
/// the batch only, as librdkafka's fetch buffers are: the stage must copy what it keeps, exactly
/// as in production.
final class TopicLog {
    struct Entry {
        var key: Range<Int>?
        var value: Range<Int>?
        var timestamp: Int64?
        var headers: [KafkaHeader]
        var stamp: WriteStamp
        /// Removed by compaction: the offset stays taken, a reader skips it.
        var compacted = false
        /// A transaction marker (or a record compacted away before anyone read it): an offset no
        /// reader is handed.
        var marker = false

        /// A reader skips it.
        var skipped: Bool { compacted || marker }
    }

    let name: String
    /// The settings given to the topic (the rest are Kafka's defaults, `SimulatedCluster.topicConfigs`).
    var configs: [String: String] = [:]
    private(set) var partitions: [[Entry]]
    private var heap: [UInt8] = []
    /// Per partition, the first offset it still holds: the log start retention or DeleteRecords
    /// moved it to (`deleteRecords`).
    private var deletedBelow: [Int64]

    init(name: String, partitions: Int) {
        precondition(partitions >= 1, "a topic has at least one partition")
        self.name = name
        self.partitions = Array(repeating: [], count: partitions)
        deletedBelow = Array(repeating: 0, count: partitions)
    }

    var partitionCount: Int { partitions.count }

    /// The first offset the partition holds (Kafka's log start offset): 0 until retention or
    /// DeleteRecords moves it (compaction keeps offsets).
    func start(of partition: Int32) -> Int64 { deletedBelow[Int(partition)] }

    /// An offset taken by what no reader is handed: a transaction's commit marker (or a record
    /// compaction removed). The log start is not moved by it; nothing is lost.
    @discardableResult
    func appendUndelivered(partition: Int32, stamp: WriteStamp) -> Int64 {
        partitions[Int(partition)].append(Entry(key: nil, value: nil, timestamp: nil, headers: [], stamp: stamp, marker: true))
        return Int64(partitions[Int(partition)].count - 1)
    }

    /// The next offset to be written (Kafka's high watermark; logs start at 0 and never shrink).
    func end(of partition: Int32) -> Int64 { Int64(partitions[Int(partition)].count) }

    @discardableResult
    func append(
        partition: Int32, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?, timestamp: Int64?,
        headers: [KafkaHeader] = [], stamp: WriteStamp
    ) -> Int64 {
        let entry = Entry(key: store(key), value: store(value), timestamp: timestamp, headers: headers, stamp: stamp)
        partitions[Int(partition)].append(entry)
        return Int64(partitions[Int(partition)].count - 1)
    }

    @discardableResult
    func append(partition: Int32, key: [UInt8]?, value: [UInt8], timestamp: Int64?, stamp: WriteStamp) -> Int64 {
        value.withUnsafeBytes { valueBytes in
            guard let key else { return append(partition: partition, key: nil, value: valueBytes, timestamp: timestamp, stamp: stamp) }
            return key.withUnsafeBytes { append(partition: partition, key: $0, value: valueBytes, timestamp: timestamp, stamp: stamp) }
        }
    }

    private func store(_ bytes: UnsafeRawBufferPointer?) -> Range<Int>? {
        guard let bytes else { return nil }
        let start = heap.count
        heap.append(contentsOf: bytes)
        return start..<heap.count
    }

    func entry(partition: Int32, offset: Int64) -> Entry { partitions[Int(partition)][Int(offset)] }

    /// The planted `lossyCompaction` fault: the latest record of the last key starting with
    /// `keyTag` is removed (a log cleaner losing a live value). Returns whether one was.
    func dropLatest(partition: Int32, keyTag: UInt8) -> Bool {
        let records = partitions[Int(partition)]
        guard let index = records.indices.last(where: { !records[$0].compacted && records[$0].value != nil && bytes(records[$0].key)?.first == keyTag })
        else { return false }
        partitions[Int(partition)][index].compacted = true
        return true
    }

    /// Kafka's log cleaner on one partition, up to `cleanedBefore` (the active segment, from
    /// there to the end, is never cleaned, so the last record always stays): a record is removed
    /// when a later record has the same key, and a tombstone that is the latest of its key is
    /// removed with it (its `delete.retention.ms` having passed). Returns how many records went.
    @discardableResult
    func compact(partition: Int32, cleanedBefore: Int64) -> Int {
        let records = partitions[Int(partition)]
        let limit = min(Int(max(0, cleanedBefore)), max(0, records.count - 1))
        var latest: [[UInt8]: Int] = [:]
        for index in records.indices where !records[index].compacted {
            latest[bytes(records[index].key) ?? []] = index
        }
        var removed = 0
        for index in 0..<limit where !records[index].compacted {
            let key = bytes(records[index].key) ?? []
            if latest[key] != index || records[index].value == nil {
                partitions[Int(partition)][index].compacted = true
                removed += 1
            }
        }
        return removed
    }

    func bytes(_ range: Range<Int>?) -> [UInt8]? { range.map { Array(heap[$0]) } }
}

// MARK: DeleteRecords

extension TopicLog {
    /// Kafka's DeleteRecords on one partition: the log start moves up to `offset` (never down,
    /// never past the end: the broker refuses that with OFFSET_OUT_OF_RANGE, see
    /// `SimulatedCluster`), and the records below it are gone for every reader. Returns the log
    /// start after it, what the broker answers (the low watermark).
    @discardableResult
    func deleteRecords(partition: Int32, below offset: Int64) -> Int64 {
        let index = Int(partition)
        deletedBelow[index] = max(deletedBelow[index], min(offset, end(of: partition)))
        return deletedBelow[index]
    }

    /// The bytes of a record as the broker keeps them: key, value and headers.
    private func size(_ entry: Entry) -> Int {
        (entry.key?.count ?? 0) + (entry.value?.count ?? 0) + entry.headers.reduce(0) { $0 + $1.key.utf8.count + ($1.value?.count ?? 0) }
    }

    /// The bytes of every record ever written to the topic.
    var writtenBytes: Int { partitions.reduce(0) { $0 + $1.reduce(0) { $0 + size($1) } } }

    /// The bytes the topic holds now: the records at or above each partition's log start that the
    /// log cleaner left.
    var retainedBytes: Int {
        partitions.indices.reduce(0) { total, index in
            total + partitions[index][Int(deletedBelow[index])...].reduce(0) { $0 + ($1.compacted ? 0 : size($1)) }
        }
    }
}
