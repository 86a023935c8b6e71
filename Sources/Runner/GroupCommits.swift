import Kafka

/// What a consumer group has committed on a topic, read without joining the group, as the
/// `PartitionStart`s its stage would be given: so that a stage can refuse commits it cannot
/// resume from before the worker joins anything (another mode's commits, another tool's).
package enum GroupCommits {
    /// Asked through `reader`, a consumer that has joined nothing, which the caller owns (the
    /// start-up asks its other questions through the same one): of its own group (`group` nil),
    /// or of `group`, which needs no client of that id (`ConsumerClient.committed(by:)`).
    package static func starts(of group: String? = nil, topic: String, partitions: Int, reader: any ConsumerClient) throws -> [PartitionStart] {
        let all = (0..<Int32(partitions)).map { TopicPartition(topic: topic, partition: $0) }
        let committed = try group.map { try reader.committed(by: $0, all) } ?? reader.committed(all)
        let resumed = committed.filter { $0.offset >= 0 }.map(\.topicPartition)
        guard !resumed.isEmpty else { return [] }
        return RebalanceListener.starts(
            of: resumed, committed: committed, beginnings: try reader.beginningOffsets(resumed), ends: try reader.endOffsets(resumed))
    }
}
