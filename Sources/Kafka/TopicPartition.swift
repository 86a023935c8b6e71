import Foundation
import CRdKafka

public struct TopicPartition: Sendable, Hashable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// A position in a partition: the next offset to read, as Kafka commits it, with the commit's
/// metadata string, which lets a consumer store a little state next to its offset.
public struct TopicPartitionOffset: Sendable, Hashable, CustomStringConvertible {
    public var topicPartition: TopicPartition
    public var offset: Int64
    public var metadata: String?

    public init(_ topicPartition: TopicPartition, offset: Int64, metadata: String? = nil) {
        self.topicPartition = topicPartition
        self.offset = offset
        self.metadata = metadata
    }

    public init(topic: String, partition: Int32, offset: Int64, metadata: String? = nil) {
        self.init(TopicPartition(topic: topic, partition: partition), offset: offset, metadata: metadata)
    }

    package var topic: String { topicPartition.topic }
    public var partition: Int32 { topicPartition.partition }

    public var description: String { "\(topicPartition)@\(offset)" }
}

/// librdkafka's logical offsets, for APIs that take "no stored offset" or "the end".
public enum KafkaOffset {
    public static let beginning: Int64 = Int64(RD_KAFKA_OFFSET_BEGINNING)
    package static let end: Int64 = Int64(RD_KAFKA_OFFSET_END)
    package static let invalid: Int64 = Int64(RD_KAFKA_OFFSET_INVALID)
}

/// Owns a native topic-partition list for the length of one call.
struct NativePartitionList: ~Copyable {
    let pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>

    init(capacity: Int) {
        // librdkafka's allocator aborts rather than return NULL.
        guard let list = rd_kafka_topic_partition_list_new(Int32(max(capacity, 1))) else {
            preconditionFailure("rd_kafka_topic_partition_list_new returned no list; rdkafka.h documents a newly allocated one")
        }
        pointer = list
    }

    init(_ partitions: [TopicPartition]) {
        self.init(capacity: partitions.count)
        for tp in partitions { _ = rd_kafka_topic_partition_list_add(pointer, tp.topic, tp.partition) }
    }

    init(_ offsets: [TopicPartitionOffset]) throws(KafkaError) {
        self.init(capacity: offsets.count)
        for tpo in offsets {
            guard let element = rd_kafka_topic_partition_list_add(pointer, tpo.topic, tpo.partition) else {
                preconditionFailure("rd_kafka_topic_partition_list_add returned no element; rdkafka.h documents the one it added")
            }
            element.pointee.offset = tpo.offset
            if let metadata = tpo.metadata {
                // The list frees metadata with free(), so it must come from malloc.
                let bytes = Array(metadata.utf8)
                guard let buffer = malloc(max(bytes.count, 1)) else {
                    throw KafkaError(.outOfMemory, "no memory for the \(bytes.count) bytes of \(tpo.topicPartition)'s commit metadata")
                }
                bytes.withUnsafeBytes { UnsafeMutableRawBufferPointer(start: buffer, count: bytes.count).copyMemory(from: $0) }
                element.pointee.metadata = buffer
                element.pointee.metadata_size = bytes.count
            }
        }
    }

    deinit { rd_kafka_topic_partition_list_destroy(pointer) }

    var offsets: [TopicPartitionOffset] { Self.offsets(of: pointer) }

    static func offsets(of list: UnsafePointer<rd_kafka_topic_partition_list_t>) -> [TopicPartitionOffset] {
        var result: [TopicPartitionOffset] = []
        result.reserveCapacity(Int(list.pointee.cnt))
        for index in 0..<Int(list.pointee.cnt) {
            let element = list.pointee.elems[index]
            var metadata: String?
            if let bytes = element.metadata, element.metadata_size > 0 {
                metadata = String(
                    decoding: UnsafeRawBufferPointer(start: bytes, count: element.metadata_size), as: UTF8.self)
            }
            result.append(
                TopicPartitionOffset(
                    topic: String(cString: element.topic), partition: element.partition,
                    offset: element.offset, metadata: metadata))
        }
        return result
    }

    /// The first per-partition error in a list a call filled in, if any.
    func firstError(_ context: String) -> KafkaError? {
        for index in 0..<Int(pointer.pointee.cnt) {
            let element = pointer.pointee.elems[index]
            if element.err.isError {
                return KafkaError.from(element.err, "\(context) \(String(cString: element.topic))[\(element.partition)]")
            }
        }
        return nil
    }
}
