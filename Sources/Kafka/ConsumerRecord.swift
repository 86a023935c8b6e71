import CRdKafka

/// One consumed record, read in place from librdkafka's buffer: nothing is copied unless
/// the caller asks. Valid only inside the `poll` body that received it.
public struct ConsumerRecord: @unchecked Sendable {
    // @unchecked: a read-only view of a message librdkafka keeps unchanged until the poll body
    // that received it returns; reading it from several threads inside that body is safe.
    let message: UnsafeMutablePointer<rd_kafka_message_t>

    public var partition: Int32 { message.pointee.partition }
    public var offset: Int64 { message.pointee.offset }

    public var topic: String {
        return message.pointee.rkt.map { string(from: rd_kafka_topic_name($0), or: "") } ?? ""
    }

    public var key: UnsafeRawBufferPointer? {
        guard let key = message.pointee.key else { return nil }
        return UnsafeRawBufferPointer(start: key, count: message.pointee.key_len)
    }

    /// The value; an empty buffer for an empty value, `nil` for a tombstone.
    public var value: UnsafeRawBufferPointer? {
        guard let payload = message.pointee.payload else { return nil }
        return UnsafeRawBufferPointer(start: payload, count: message.pointee.len)
    }

    /// Epoch milliseconds (create or log-append time), `nil` when the record has none.
    public var timestamp: Int64? {
        let ts = rd_kafka_message_timestamp(message, nil)
        return ts < 0 ? nil : ts
    }

    /// How many headers the record carries, without copying them.
    ///
    /// Asking librdkafka (2.0.2) costs an allocation and a free even for a record without
    /// headers (it sets a parser up for the header bytes to find there are none): about a
    /// tenth of the single-stage worker's CPU when asked of every record. So the common case is
    /// read in place first. In the record format of Kafka 0.11 and later, the header count (a
    /// zigzag varint) directly follows the value, and librdkafka hands a value out where it
    /// lies in the fetched record batch: a zero byte there means no headers. Older formats
    /// carry no headers at all, so "none" is right for them whatever that byte is. The byte is
    /// read only when it lies on the same memory page as the value's last byte (which is
    /// mapped), so the read cannot fault; otherwise, and whenever the byte is not zero (or the
    /// value is empty or absent), librdkafka is asked.
    ///
    /// That the value is handed out in place, with its header bytes right after it, is how
    /// librdkafka's record reader works, not something its API promises. So the byte is read
    /// only on the versions it was checked for (`Librdkafka.headerCountInPlaceVersions`, by
    /// tests on 2.0.2 and 2.16 and in the reader's source for those between:
    /// docs/compatibility.md); on any other, librdkafka is asked for every record.
    var headerCount: Int {
        if Librdkafka.readsHeaderCountInPlace, byteAfterValue == 0 { return 0 }
        return headerCountFromLibrdkafka
    }

    /// The byte that follows a non-empty value, when it lies on the same memory page as the
    /// value's last byte (so reading it cannot fault); nil otherwise. Where librdkafka hands
    /// values out in place, it is the first byte of the header count.
    var byteAfterValue: UInt8? {
        guard let payload = message.pointee.payload, message.pointee.len > 0 else { return nil }
        let end = UInt(bitPattern: payload) &+ UInt(message.pointee.len)
        guard end & 0xFFF != 0 else { return nil }
        return payload.load(fromByteOffset: message.pointee.len, as: UInt8.self)
    }

    /// The header count as librdkafka parses it (an allocation and a free per call).
    var headerCountFromLibrdkafka: Int {
        var native: OpaquePointer?
        guard rd_kafka_message_headers(message, &native) == RD_KAFKA_RESP_ERR_NO_ERROR, let native else { return 0 }
        return rd_kafka_header_cnt(native)
    }

    /// Headers, copied out (this allocates: use only where needed).
    var headers: [KafkaHeader] { copiedHeaders(of: message) }
}

/// The headers of a message, copied out (this allocates: use only where needed).
func copiedHeaders(of message: UnsafePointer<rd_kafka_message_t>) -> [KafkaHeader] {
    var native: OpaquePointer?
    guard rd_kafka_message_headers(message, &native) == RD_KAFKA_RESP_ERR_NO_ERROR, let native else { return [] }
    var result: [KafkaHeader] = []
    var index = 0
    var name: UnsafePointer<CChar>?
    var value: UnsafeRawPointer?
    var size = 0
    while rd_kafka_header_get_all(native, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
        let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) }
        result.append(KafkaHeader(key: name.map { String(cString: $0) } ?? "", value: bytes))
        index += 1
    }
    return result
}

/// What one poll can hand back: a record, the end of a partition (when `enable.partition.eof`
/// is on), or an error librdkafka reports to the application (most are transient and logged).
/// `Record` is librdkafka's `ConsumerRecord` read in place, or the `PolledRecord` a stage
/// runner reads from any client (`PolledBatch`).
public enum ConsumerEvent<Record> {
    case record(Record)
    case partitionEOF(TopicPartition, offset: Int64)
    case error(KafkaError)
}

/// The events of one poll, read in place; valid only inside the `pollBatch` body.
public struct ConsumerBatch: RandomAccessCollection, @unchecked Sendable {
    // Read-only views of messages librdkafka owns until the body returns; safe to read from
    // several threads at once.
    let messages: UnsafeBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>
    /// Partitions revoked while the batch was gathered, in order: the messages before
    /// `before` of those partitions came from an assignment that no longer holds.
    public let revocations: [Revocation]

    public struct Revocation: Sendable, Equatable {
        /// How many messages of the batch had been gathered when the partitions were revoked.
        public var before: Int
        /// The partitions revoked; nil: all of them (the assignment was lost).
        public var partitions: [TopicPartition]?

        package init(before: Int, partitions: [TopicPartition]?) {
            self.before = before
            self.partitions = partitions
        }
    }

    init(messages: UnsafeBufferPointer<UnsafeMutablePointer<rd_kafka_message_t>>, revocations: [Revocation] = []) {
        self.messages = messages
        self.revocations = revocations
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { messages.count }

    public subscript(position: Int) -> ConsumerEvent<ConsumerRecord> {
        let message = messages[position]
        if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR { return .record(ConsumerRecord(message: message)) }
        return Self.event(notRecord: message)
    }

    /// What a message that is not a record says: the end of its partition, or an error.
    private static func event<Record>(notRecord message: UnsafeMutablePointer<rd_kafka_message_t>) -> ConsumerEvent<Record> {
        let record = ConsumerRecord(message: message)
        let err = message.pointee.err
        if err == RD_KAFKA_RESP_ERR__PARTITION_EOF {
            return .partitionEOF(TopicPartition(topic: record.topic, partition: record.partition), offset: record.offset)
        }
        let detail = record.value.map { String(decoding: $0, as: UTF8.self) } ?? ""
        return .error(KafkaError.from(err, "consumer error \(detail)"))
    }
}

extension ConsumerBatch: PolledBatch {
    /// A record's fields read straight from its message: going through `self[index]` built
    /// the event of a `ConsumerRecord` first, to take it apart (callgrind: 36 instructions a
    /// record, in a call of its own).
    public func event(at index: Int) -> ConsumerEvent<PolledRecord> {
        let message = messages[index]
        guard message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR else { return Self.event(notRecord: message) }
        let record = ConsumerRecord(message: message)
        return .record(
            PolledRecord(
                partition: record.partition, offset: record.offset, key: record.key, value: record.value, timestamp: record.timestamp,
                headerCount: HeaderCount(of: message) { message in
                    message.map { ConsumerRecord(message: UnsafeMutablePointer(mutating: $0.assumingMemoryBound(to: rd_kafka_message_t.self))).headerCount } ?? 0
                }))
    }
}
