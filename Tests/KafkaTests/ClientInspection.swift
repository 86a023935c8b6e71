import CRdKafka

@testable import Kafka

/// What the tests read of a consumer beside what the worker asks of it.
extension KafkaConsumer {
    /// A property's value as this consumer's client holds it (librdkafka's default when none was set).
    func effectiveProperty(_ name: String) -> Int? { Self.integerProperty(client, name) }

    /// `applyAssignment` on this consumer's client, outside any rebalance.
    func applyAssignment(_ partitions: [TopicPartition], cooperative: Bool) -> KafkaError? {
        let list = NativePartitionList(partitions)
        return Self.applyAssignment(client, list.pointer, cooperative: cooperative)
    }

    /// Wakes performed by the fetch waker so far (nil without one).
    var fetchWakes: Int? { fetchWaker?.count }

    /// A wake of the fetcher is waiting for its answer.
    var isWakingFetcher: Bool { fetchWaker?.isWaking ?? false }

    /// The partitions this member holds right now.
    func assignment() throws -> [TopicPartition] {
        var list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        let err = rd_kafka_assignment(client, &list)
        if err.isError { throw KafkaError.from(err, "reading the assignment") }
        guard let list else { return [] }
        defer { rd_kafka_topic_partition_list_destroy(list) }
        return NativePartitionList.offsets(of: list).map(\.topicPartition)
    }
}

extension SecretRedactor {
    /// How many distinct values are hidden (never the values).
    var count: Int { values.count }

    /// Whether `text` holds any of the values (what must never happen in output).
    func reveals(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return values.contains { Self.firstIndex(of: $0, in: bytes, from: 0) != nil }
    }
}
