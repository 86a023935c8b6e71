import Pipeline

/// What the simulated cluster (`SimulatedCluster`) keeps: topics and consumer groups' commits, nothing else.
/// No broker, no network, no time: a record is readable the moment it is written (the
/// simulation treats every send as acknowledged at once) and nothing is ever deleted.
final class InMemoryKafka {
    /// What a group committed for one partition: the next offset to read and the metadata.
    struct Committed: Equatable, CustomStringConvertible {
        var offset: Int64
        var metadata: String?

        var description: String { metadata.map { "\(offset) [\($0)]" } ?? "\(offset)" }
    }

    private(set) var topics: [String: TopicLog] = [:]
    /// group → topic → partition → commit.
    private var commits: [String: [String: [Int32: Committed]]] = [:]
    /// Every commit, in order, while tracing (group, topic, partition, commit).
    var commitTrace: [(group: String, topic: String, partition: Int32, committed: Committed)]?

    @discardableResult
    func create(_ name: String, partitions: Int) -> TopicLog {
        precondition(topics[name] == nil, "topic \(name) exists")
        let log = TopicLog(name: name, partitions: partitions)
        topics[name] = log
        return log
    }

    func topic(_ name: String) -> TopicLog {
        guard let log = topics[name] else { preconditionFailure("no topic \(name)") }
        return log
    }

    func committed(group: String, topic: String, partition: Int32) -> Committed? {
        commits[group]?[topic]?[partition]
    }

    func commit(group: String, topic: String, partition: Int32, _ committed: Committed) {
        commits[group, default: [:]][topic, default: [:]][partition] = committed
        commitTrace?.append((group, topic, partition, committed))
    }
}

/// The input topic read back by position, as `InputTopicLookup` does against Kafka: a position
/// past a partition's end, or of a topic the cluster does not hold, is not found.
struct InMemoryLookup: OriginalLookup, @unchecked Sendable {
    // @unchecked: the simulation runs on one thread; the cluster is never touched concurrently.
    let kafka: InMemoryKafka

    func messages(at positions: Set<InputPosition>) throws -> [InputPosition: InputMessage] {
        var found: [InputPosition: InputMessage] = [:]
        for position in positions {
            guard let log = kafka.topics[position.topic], Int(position.partition) < log.partitionCount,
                position.offset >= log.start(of: position.partition), position.offset < log.end(of: position.partition)
            else { continue }
            let entry = log.entry(partition: position.partition, offset: position.offset)
            found[position] = InputMessage(key: log.bytes(entry.key), value: log.bytes(entry.value), timestamp: entry.timestamp)
        }
        return found
    }
}
