/// Lets the owner of a consumer act at the two moments that matter for correctness:
/// before partitions are taken away (last chance to commit what was processed) and after
/// new ones are assigned (read committed offsets and metadata, reset state).
///
/// Both run on the thread that polls the consumer, inside `poll`.
public struct RebalanceHandler: Sendable {
    public var partitionsAssigned: @Sendable ([TopicPartition]) -> Void
    public var partitionsRevoking: @Sendable ([TopicPartition]) -> Void
    /// librdkafka refused to take (or give up) the partitions the group decided: the member and
    /// the group now disagree on what it owns, which only leaving the group repairs.
    public var assignmentFailed: @Sendable (KafkaError) -> Void

    public init(
        partitionsAssigned: @escaping @Sendable ([TopicPartition]) -> Void = { _ in },
        partitionsRevoking: @escaping @Sendable ([TopicPartition]) -> Void = { _ in },
        assignmentFailed: @escaping @Sendable (KafkaError) -> Void = { _ in }
    ) {
        self.partitionsAssigned = partitionsAssigned
        self.partitionsRevoking = partitionsRevoking
        self.assignmentFailed = assignmentFailed
    }
}
