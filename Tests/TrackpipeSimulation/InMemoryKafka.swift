import Pipeline

/// What the simulated cluster (`SimulatedCluster`) keeps: topics and consumer groups' commits, nothing else.
/// The cluster's clients read and write them; records go only as the log cleaner compacts the
/// state topic and as retention or DeleteRecords moves a log start (`TopicLog`).
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
    func create(_ name: String, partitions: Int, configs: [String: String] = [:]) -> TopicLog {
        precondition(topics[name] == nil, "topic \(name) exists")
        let log = TopicLog(name: name, partitions: partitions)
        log.configs = configs
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

    /// Every group's commit on one partition, by group.
    func commits(topic: String, partition: Int32) -> [String: Committed] {
        commits.compactMapValues { $0[topic]?[partition] }
    }

    func commit(group: String, topic: String, partition: Int32, _ committed: Committed) {
        commits[group, default: [:]][topic, default: [:]][partition] = committed
        commitTrace?.append((group, topic, partition, committed))
    }
}
