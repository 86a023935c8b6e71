import Kafka

/// How a `StageRunner` meets Kafka. Everything that differs between `run`, `run --until-end`,
/// the two stages of the scaled-out worker and a replay is one of these values, not a branch
/// in the runner.
public struct RunnerSettings: Sendable {
    public enum Source: Sendable {
        /// Partitions come from a consumer group subscription; commits go to the group.
        case group
        /// A fixed assignment with explicit start offsets: no group, no rebalances.
        case assignment([TopicPartitionOffset])
    }

    public enum Bound: Sendable {
        case unbounded
        /// Stop at each partition's end offset as of its assignment.
        case endAtAssignment
        /// Stop at the end offsets as of the moment the upstream runner finished.
        case endWhenUpstreamFinishes(UpstreamSignal)
    }

    public var topic: String
    public var source: Source
    public var bound: Bound
    public var commits: Bool
    public var consumer: KafkaConfig
    public var producer: KafkaConfig
    public var destinations: [Destination: String]
    /// Destinations written as JSON Lines (one record value per line) instead of a topic.
    public var lineOutputs: [Destination: LineWriter] = [:]
    /// Destinations whose records are counted but not sent anywhere (a replay without a
    /// dead-letter topic).
    public var discarded: Set<Destination> = []
    public var commitInterval: Int64
    /// How often a progress line is logged (ms); 0 turns it off.
    public var progressInterval: Int64 = 30_000
    /// `/health` reports a problem after this long without a turn of the loop, or, in a group,
    /// without an assignment (ms).
    public var unhealthyAfter: Int64 = 60_000
    /// How often the stage is given the time when records keep coming (ms).
    public var tickInterval: Int64 = 200
    public var maxBatch: Int = 4_096
    /// Time every produce call for the timeline (`run --timings`).
    public var timings = false
    /// Unacknowledged output (bytes) above which the input is paused; 0: never pause.
    public var outputBacklogLimit = 32 << 20

    public init(
        topic: String, source: Source, bound: Bound, commits: Bool, consumer: KafkaConfig, producer: KafkaConfig,
        destinations: [Destination: String], commitInterval: Int64
    ) {
        self.topic = topic
        self.source = source
        self.bound = bound
        self.commits = commits
        self.consumer = consumer
        self.producer = producer
        self.destinations = destinations
        self.commitInterval = commitInterval
    }

    var isBounded: Bool {
        if case .unbounded = bound { false } else { true }
    }

    var joinsGroup: Bool {
        if case .group = source { true } else { false }
    }

    /// The consumer group, for messages.
    var group: String { consumer["group.id"] ?? "" }
}
