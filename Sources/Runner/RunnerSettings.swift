import RecordFormats
import Kafka
import Synchronization

/// How a `StageRunner` meets Kafka. Everything that differs between `run`, `run --until-end`,
/// the two stages of the scaled-out worker and a replay is one of these values, not a branch
/// in the runner.
package struct RunnerSettings: Sendable {
    /// Where the runner's partitions come from.
    package enum Assignment: Sendable {
        /// A consumer group subscription; commits go to the group.
        case group
        /// Fixed partitions with explicit start offsets: no group, so no rebalances and nothing
        /// to commit to (a replay).
        case fixed([TopicPartitionOffset])
    }

    package enum Bound: Sendable {
        case unbounded
        /// Stop at each partition's end offset as of its assignment.
        case endAtAssignment
        /// Stop at the end offsets as of the moment the upstream runner finished.
        case endWhenUpstreamFinishes(UpstreamSignal)
    }

    package var topic: String
    /// How many partitions `topic` has, where known: a bounded run in a group ends only once it
    /// has read every one of them to its end (`PartitionTracker.heldByOthers`).
    package var partitionCount: Int?
    package var assignment: Assignment
    package var bound: Bound
    package var consumer: KafkaConfig
    package var producer: KafkaConfig
    package var destinations: [Destination: String]
    /// With several window sizes, the output topic of each size (ms): an `.output` record goes
    /// to its size's (`OutgoingRecord.windowSize`). Empty: every one to `destinations[.output]`.
    package var outputsBySize: [Int64: String] = [:]
    /// Destinations written as JSON Lines (one record value per line) instead of a topic.
    package var lineOutputs: [Destination: LineWriter] = [:]
    /// Destinations whose records are counted but not sent anywhere (a replay without a
    /// dead-letter topic).
    package var discarded: Set<Destination> = []
    package var commitInterval: Int64
    /// How often a progress line is logged (ms); 0 turns it off.
    package var progressInterval: Int64 = 30_000
    /// Liveness fails after this long without a turn of the loop; readiness also after this
    /// long waiting on the cluster, or, in a group,
    /// without an assignment (ms).
    package var unhealthyAfter: Int64 = 60_000
    /// How often the stage is given the time when records keep coming (ms).
    package var tickInterval: Int64 = 200
    package var maxBatch: Int = 4_096
    /// Time every produce call for the timeline (`run --timings`).
    package var timings = false
    /// Unacknowledged output (bytes) above which the input is paused; 0: never pause.
    package var outputBacklogLimit = 32 << 20
    /// Where the runner's Kafka clients come from: librdkafka, or a simulated cluster.
    package var clients: any KafkaClientFactory = LibrdkafkaClients()
    /// The most bytes one produced record may take (see `RecordLimit`): dead letters are cut to it.
    package var recordLimit = RecordLimit(bytes: RecordLimit.librdkafkaDefault)
    /// Delete the input's records below what the group committed (see `PurgeSchedule`): only
    /// for an input no one else reads, the repartition topic; nil (the user's topics, a replay,
    /// `--purge-interval 0`): never.
    package var purge: PurgeSettings?
    /// Judges what the run wrote to its output topics (by topic): called once, when its first
    /// records there are acknowledged and before it sends any more; throwing stops the run. It is
    /// the pipeline's rule of what an output topic may hold (`WindowSizeCheck`); nil: none.
    package var checkFirstOutput: (@Sendable ([String: AcknowledgedRecords]) throws -> Void)?

    /// Aggregate records go to `topics`, one per size of `sizes` (in the same order), or all to
    /// the one.
    package mutating func output(to topics: [String], sizes: [Int64]) {
        destinations[.output] = topics.first
        outputsBySize = topics.count > 1 ? Dictionary(uniqueKeysWithValues: zip(sizes, topics)) : [:]
    }

    /// Every output topic: each size's, or the one.
    var outputTopics: Set<String> {
        Set(outputsBySize.values).union(destinations[.output].map { [$0] } ?? [])
    }

    package init(
        topic: String, assignment: Assignment, bound: Bound, consumer: KafkaConfig, producer: KafkaConfig,
        destinations: [Destination: String], commitInterval: Int64
    ) {
        self.topic = topic
        self.assignment = assignment
        self.bound = bound
        self.consumer = consumer
        self.producer = producer
        self.destinations = destinations
        self.commitInterval = commitInterval
    }

    var isBounded: Bool {
        if case .unbounded = bound { false } else { true }
    }

    /// Whether the runner is in a group, and so commits to it.
    var joinsGroup: Bool {
        if case .group = assignment { true } else { false }
    }

    /// The consumer group, for messages.
    var group: String { consumer["group.id"] ?? "" }
}

/// How a runner purges its input (see `PurgeSchedule`).
package struct PurgeSettings: Sendable {
    /// The least time between two purges (ms, above 0).
    package var interval: Int64

    package init(interval: Int64) {
        self.interval = interval
    }
}

/// The most bytes one produced record may take: the producer's `message.max.bytes`, lowered to
/// an output topic's `max.message.bytes` once the cluster has said it is lower. Asking takes a
/// while (and up to a timeout on a cluster that cannot answer), so the worker starts with the
/// producer's limit and learns the topics' on the side; the runner's sinks read it per dead
/// letter. Shared by the runners of one worker.
package final class RecordLimit: Sendable {
    private let current: Atomic<Int>

    /// librdkafka's default `message.max.bytes`.
    package static let librdkafkaDefault = 1_000_000

    package init(bytes: Int) { current = Atomic(bytes) }

    package var bytes: Int { current.load(ordering: .relaxed) }

    /// Lowers the limit to `bytes` if that is lower; returns whether it did.
    @discardableResult
    package func lower(to bytes: Int) -> Bool {
        var now = current.load(ordering: .relaxed)
        while bytes < now {
            let (exchanged, original) = current.compareExchange(expected: now, desired: bytes, ordering: .relaxed)
            if exchanged { return true }
            now = original
        }
        return false
    }
}
