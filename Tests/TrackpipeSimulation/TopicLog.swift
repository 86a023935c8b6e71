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
}

/// One topic of the in-memory cluster: per partition an append-only log.
///
/// The bytes of every record live in one growing buffer, and a batch hands the stage views into
/// it, as librdkafka hands out views into its fetch buffers: the stage must copy what it keeps,
/// exactly as in production.
final class TopicLog {
    struct Entry {
        var key: Range<Int>?
        var value: Range<Int>?
        var timestamp: Int64?
        var headers: [KafkaHeader]
        var stamp: WriteStamp
    }

    let name: String
    private(set) var partitions: [[Entry]]
    private var heap: [UInt8] = []

    init(name: String, partitions: Int) {
        precondition(partitions >= 1, "a topic has at least one partition")
        self.name = name
        self.partitions = Array(repeating: [], count: partitions)
    }

    var partitionCount: Int { partitions.count }

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

    func bytes(_ range: Range<Int>?) -> [UInt8]? { range.map { Array(heap[$0]) } }

    /// The records of `slices`, in slice order, as views valid during `body` only.
    func withInputRecords<R>(_ slices: [(partition: Int32, offsets: Range<Int64>)], _ body: ([InputRecord]) throws -> R) rethrows -> R {
        try heap.withUnsafeBytes { base in
            var records: [InputRecord] = []
            records.reserveCapacity(slices.reduce(0) { $0 + $1.offsets.count })
            for slice in slices {
                for offset in slice.offsets {
                    let entry = partitions[Int(slice.partition)][Int(offset)]
                    records.append(
                        InputRecord(
                            partition: slice.partition, offset: offset, key: entry.key.map { UnsafeRawBufferPointer(rebasing: base[$0]) },
                            value: entry.value.map { UnsafeRawBufferPointer(rebasing: base[$0]) }, timestamp: entry.timestamp))
                }
            }
            return try body(records)
        }
    }
}
