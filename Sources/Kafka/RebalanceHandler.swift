/// Lets the owner of a consumer act at the two moments that matter for correctness:
/// before partitions are taken away (last chance to commit what was processed) and after
/// new ones are assigned (read committed offsets and metadata, reset state).
///
/// Both run on the thread that polls the consumer, inside `poll`.
public struct RebalanceHandler: Sendable {
    public var partitionsAssigned: @Sendable ([TopicPartition]) -> Void
    public var partitionsRevoking: @Sendable ([TopicPartition]) -> Void

    public init(
        partitionsAssigned: @escaping @Sendable ([TopicPartition]) -> Void = { _ in },
        partitionsRevoking: @escaping @Sendable ([TopicPartition]) -> Void = { _ in }
    ) {
        self.partitionsAssigned = partitionsAssigned
        self.partitionsRevoking = partitionsRevoking
    }
}
