import Kafka
import Logging
import Pipeline
import Runner

/// One record of a state write, as the world classifies a write cut short: its key, and whether
/// it is a tombstone.
struct StateWriteRecord {
    var key: [UInt8]
    var tombstone: Bool
}

/// How the schedule cuts a process's next polls: at most `budget` records, in runs chosen by
/// `cut` (0: the poll brings nothing, as one that times out).
struct PollPlan {
    var budget: Int
    var cut: UInt64
}

/// What the I/O of a killed process throws: nothing it does reaches the cluster any more.
struct ProcessKilled: Error, CustomStringConvertible {
    var description: String { "the process was killed" }
}

/// What the clients of one simulated worker process share: whether it still lives, where it is
/// armed to die, how the schedule cuts its polls, and how its writes are stamped. A kill is
/// SIGKILL as the cluster sees it: the consumers leave their groups without a callback or a
/// commit, whatever the producer had not delivered is gone, and every later call throws.
final class ProcessLife {
    private(set) var killed = false
    /// Armed to die in the middle of the next commit: after some of the state records it writes
    /// reached the state topic (`writingState`), once the state it writes is acknowledged
    /// (`prepared`), or when it commits the offsets (`completed`, and the others if no state was
    /// written, or fewer records than the count), before they reach the coordinator.
    var dieAt: CommitPhase?
    /// With a death armed in the middle of a state write: how many of its records reach the
    /// state topic (worked out from the write's size once it is delivered).
    var stateCut: Int?
    /// Told of a state write cut short by the death: the records that reached the state topic and
    /// those lost, in the order sent.
    var onStateWriteCut: ((_ written: [StateWriteRecord], _ lost: [StateWriteRecord]) -> Void)?
    /// The records delivered of the write being cut, so far.
    var stateWrite: [StateWriteRecord] = []
    /// The planted `unorderedStateWrite` fault: a state write cut short keeps its deletions.
    var keepsDeletionsOfACutWrite = false
    /// How the next polls are cut; nil: a whole partition at a time, up to the batch size.
    var plan: PollPlan?
    /// The planted `skipOneRecord` fault: records (topic, partition, offset) never delivered.
    var skip: ((String, Int32, Int64) -> Bool)?
    /// Who the writes are by, for the checks; nil: the hit producer's stamp.
    var stamp: (() -> WriteStamp)?
    /// The state topic, whose acknowledgement a death at `prepared` waits for.
    var stateTopic: String?
    /// The planted `overtakenRecords` fault: the repartition records this process sends reach
    /// the topic this many ms later (and what it sends after them waits behind them), unless a
    /// flush waits for them.
    var repartitionDelay: Int64?
    /// What its group consumers owned when it died: the group hands it on.
    private(set) var ownedAtDeath: [Int32] = []
    /// The clients the process made, to be killed with it. Held weakly: each client holds its
    /// life, and a producer holds its runner's delivery callback, whose `RunnerControl` holds the
    /// runner's settings and so the `ProcessClients` holding this life. Held strongly, every
    /// life, its clients, its runner's control and the cluster outlived their schedule (0.8 MB a
    /// schedule, for ever in a campaign). A client its runner let go has nothing left to kill.
    private var consumerRefs: [WeakRef<SimulatedConsumer>] = []
    private var producerRefs: [WeakRef<SimulatedProducer>] = []
    fileprivate var consumers: [SimulatedConsumer] { consumerRefs.compactMap(\.object) }
    /// Every consumer the process made, closed ones too: each is a client, with its connections.
    fileprivate var consumersMade: Int { consumerRefs.count }
    fileprivate var producers: [SimulatedProducer] { producerRefs.compactMap(\.object) }
    fileprivate func adopt(_ consumer: SimulatedConsumer) { consumerRefs.append(WeakRef(object: consumer)) }
    fileprivate func adopt(_ producer: SimulatedProducer) { producerRefs.append(WeakRef(object: producer)) }

    var diesAtCommit: Bool { dieAt != nil }
    var diesOnceStateIsWritten: Bool { dieAt == .prepared }
    /// The share of a state write that reaches the state topic before the process dies (nil:
    /// not armed so).
    var statePercentBeforeDeath: Int? {
        guard case .writingState(let percent) = dieAt else { return nil }
        return percent
    }

    func check() throws { if killed { throw ProcessKilled() } }

    /// Kills the process; returns what its interrupted call throws.
    @discardableResult
    func kill() -> ProcessKilled {
        guard !killed else { return ProcessKilled() }
        ownedAtDeath = consumers.filter(\.isMember).flatMap { $0.readPositions.keys.map(\.partition) }.sorted()
        killed = true
        dieAt = nil
        for consumer in consumers { consumer.crash() }
        for producer in producers { producer.crash() }
        return ProcessKilled()
    }
}

private struct WeakRef<Object: AnyObject> {
    weak var object: Object?
}

/// The cluster's clients for one worker process (or one stage of it), sharing its life.
final class ProcessClients: KafkaClientFactory, @unchecked Sendable {
    // @unchecked: the simulation runs on one thread.
    let cluster: SimulatedCluster
    let life: ProcessLife

    init(cluster: SimulatedCluster, life: ProcessLife = ProcessLife()) {
        self.cluster = cluster
        self.life = life
    }

    var consumers: [SimulatedConsumer] { life.consumers }
    var consumersMade: Int { life.consumersMade }

    func consumer(
        config: KafkaConfig, logger: Logger, rebalance: RebalanceHandler?, maxBatch: Int, wakesFetcher: Bool,
        onError: (@Sendable (KafkaError) -> Void)?
    ) throws -> any ConsumerClient {
        try life.check()
        let consumer = cluster.consumer(config: config, rebalance: rebalance, maxBatch: maxBatch, life: life)
        life.adopt(consumer)
        return consumer
    }

    func producer(
        config: KafkaConfig, logger: Logger, onDelivery: (@Sendable (DeliveryReport) -> Void)?,
        onError: (@Sendable (KafkaError) -> Void)?, isStopping: @escaping @Sendable () -> Bool
    ) throws -> any ProducerClient {
        try life.check()
        let producer = SimulatedProducer(cluster: cluster, onDelivery: onDelivery, life: life) { [cluster, life] in
            SimulatedDeleter(cluster: cluster, life: life) { [life] in life.consumers }
        }
        life.adopt(producer)
        return producer
    }

    func crash() { life.kill() }
}
