import Kafka

/// A simulated consumer's poll: events held in memory rather than in librdkafka's buffers.
struct HeldBatch: PolledBatch {
    let events: [HeldRecord]
    let revocations: [ConsumerBatch.Revocation]

    var count: Int { events.count }

    func event(at index: Int) -> ConsumerEvent<PolledRecord> { events[index].event }
}

/// A consumed record, or the end of a partition, held in memory. It keeps its own copy of the bytes for as long as it lives
/// (at least the `pollBatch` body that receives it), so that the stage reads views as it does
/// of librdkafka's buffers.
final class HeldRecord {
    let topic: String
    let partition: Int32
    let offset: Int64
    let timestamp: Int64?
    let headerCount: Int
    private let key: UnsafeMutableRawBufferPointer?
    private let value: UnsafeMutableRawBufferPointer?
    private let isEnd: Bool

    /// A record.
    convenience init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8]?, timestamp: Int64?, headers: [KafkaHeader] = []
    ) {
        self.init(
            topic: topic, partition: partition, offset: offset, key: key, value: value, timestamp: timestamp, headerCount: headers.count,
            isEnd: false)
    }

    /// The end of a partition (`enable.partition.eof`): `offset` is where it ends.
    static func partitionEnd(topic: String, partition: Int32, offset: Int64) -> HeldRecord {
        HeldRecord(topic: topic, partition: partition, offset: offset, key: nil, value: nil, timestamp: nil, headerCount: 0, isEnd: true)
    }

    private init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8]?, timestamp: Int64?, headerCount: Int, isEnd: Bool
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.headerCount = headerCount
        self.isEnd = isEnd
        func copy(_ bytes: [UInt8]?) -> UnsafeMutableRawBufferPointer? {
            guard let bytes else { return nil }
            // One byte more than needed, so that an empty value is a valid, non-nil buffer.
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count + 1, alignment: 1)
            buffer.copyBytes(from: bytes)
            return UnsafeMutableRawBufferPointer(rebasing: buffer[..<bytes.count])
        }
        self.key = copy(key)
        self.value = copy(value)
    }

    deinit {
        key?.baseAddress?.deallocate()
        value?.baseAddress?.deallocate()
    }

    var event: ConsumerEvent<PolledRecord> {
        if isEnd { return .partitionEOF(TopicPartition(topic: topic, partition: partition), offset: offset) }
        return .record(
            PolledRecord(
                partition: partition, offset: offset, key: key.map { UnsafeRawBufferPointer($0) }, value: value.map { UnsafeRawBufferPointer($0) },
                timestamp: timestamp,
                headerCount: HeaderCount(of: UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque())) { record in
                    record.map { Unmanaged<HeldRecord>.fromOpaque($0).takeUnretainedValue().headerCount } ?? 0
                }))
    }
}
