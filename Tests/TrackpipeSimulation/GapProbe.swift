import HitGenerator
import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import TrackingDomain

/// One bounded run of the real normalize stage in its real runner, over an input laid out by
/// hand on the simulated cluster: hits, offsets never delivered though the log holds them
/// (transaction markers, records compaction removed), a commit to start from, and retention
/// before the run or while it reads. The runner-level tests of the lost-input rule use it
/// (Tests/PipelineTests/Runner/InputLossTests.swift): neither embedded broker writes markers or
/// compacts.
public enum GapProbe {
    /// The probe's group, fixed to one-minute windows through probe-repartition.
    static let identity = GroupIdentity(
        group: "probe", inputTopic: "hits", windowSizes: [60_000], repartitionTopic: "probe-repartition", stateTopic: "probe-state")

    /// One offset of a partition.
    public enum Slot: Sendable {
        case hit
        /// An offset no consumer is handed: a transaction marker, or a record compaction removed.
        case marker
    }

    /// A partition of the input as laid out before the run.
    public struct Partition: Sendable {
        public var slots: [Slot]
        /// The group's commit on it (nil: none).
        public var committed: Int64?
        /// Retention deletes every record below this before the run.
        public var deletedBefore: Int64
        /// Once the run has read this many records of the partition, retention deletes every
        /// record below `to`.
        public var deletedWhileReading: (after: Int, to: Int64)?
        /// Retention deletes every record below this once the partition is assigned, before its
        /// first fetch.
        public var deletedAtAssignment: Int64?

        public init(
            _ slots: [Slot], committed: Int64? = nil, deletedBefore: Int64 = 0, deletedWhileReading: (after: Int, to: Int64)? = nil,
            deletedAtAssignment: Int64? = nil
        ) {
            self.slots = slots
            self.committed = committed
            self.deletedBefore = deletedBefore
            self.deletedWhileReading = deletedWhileReading
            self.deletedAtAssignment = deletedAtAssignment
        }
    }

    /// What the run came to: its summary (nil when it failed, with the error), and what the
    /// stage consumed per partition.
    public struct Outcome: Sendable {
        public var summary: StageSummary?
        public var error: String?
        public var consumed: Int { summary?.accounting.consumed ?? 0 }
        public var lost: [InputSpan] { summary?.lostInput ?? [] }
        public var gaps: [InputSpan] { summary?.offsetGaps ?? [] }
    }

    /// Runs `run --until-end`'s normalize stage over `partitions` of topic `hits` (group `probe`),
    /// reading at most `batch` records a poll. The first `failedEndLookups` lookups of where the
    /// partitions end are answered NOT_LEADER_FOR_PARTITION, as while a leader moves.
    public static func boundedRun(_ partitions: [Partition], batch: Int = 3, failedEndLookups: Int = 0) -> Outcome {
        let kafka = InMemoryKafka()
        let cluster = SimulatedCluster(kafka: kafka, now: 1_795_341_600_000)
        cluster.failedEndLookups = failedEndLookups
        let input = kafka.create("hits", partitions: partitions.count)
        kafka.create("probe-repartition", partitions: 1)
        kafka.create("dlq", partitions: 1)
        var hits = HitStream(HitStreamConfig(count: 10_000, seed: 7, deliveries: 3)).generate().makeIterator()
        let stamp = WriteStamp(time: cluster.now, writer: -1, outputCrashes: 0)
        for (number, partition) in partitions.enumerated() {
            let index = Int32(number)
            for slot in partition.slots {
                switch slot {
                case .hit:
                    let hit = hits.next()!
                    input.append(partition: index, key: hit.key, value: hit.value, timestamp: cluster.now, stamp: stamp)
                case .marker:
                    input.appendUndelivered(partition: index, stamp: stamp)
                }
            }
            if let committed = partition.committed {
                kafka.commit(
                    group: "probe", topic: "hits", partition: index,
                    InMemoryKafka.Committed(offset: committed, metadata: SourceCheckpoint(epoch: 0, identity: Self.identity).encoded))
            }
            input.deleteRecords(partition: index, below: partition.deletedBefore)
        }
        cluster.afterAssignment = { tp in
            guard tp.topic == "hits", let below = partitions[Int(tp.partition)].deletedAtAssignment else { return }
            input.deleteRecords(partition: tp.partition, below: below)
        }
        let clients = ProcessClients(cluster: cluster)
        var settings = RunnerSettings(
            topic: "hits", assignment: .group, bound: .endAtAssignment,
            consumer: KafkaConfig(["group.id": "probe", "enable.partition.eof": "true"]), producer: KafkaConfig([:]),
            destinations: [.repartition: "probe-repartition", .deadLetter: "dlq"], commitInterval: .max / 4)
        settings.clients = clients
        settings.maxBatch = batch
        settings.progressInterval = 0
        let stage = NormalizeStage(
            sourcePartitions: partitions.count, repartitionPartitions: 1, identity: Self.identity,
            limits: NormalizerLimits(), maxFutureSkew: 3_600_000, idleTimeout: 30_000,
            originals: OriginalRule(windowSizes: [60_000], retention: 3_600_000, delayAllowance: 30_000))
        let runner = StageRunner(stage: stage, settings: settings, logger: Logger(label: "trackpipe.probe") { _ in SwiftLogNoOpLogHandler() }, clock: cluster.clock)
        var pending = partitions.enumerated().compactMap { number, partition in partition.deletedWhileReading.map { (Int32(number), $0) } }
        do {
            try runner.begin()
            var turns = 0
            while try runner.turn() {
                cluster.now += 100
                turns += 1
                guard turns < 10_000 else { return Outcome(summary: nil, error: "the bounded run did not end") }
                let read = clients.consumers.filter(\.isMember).flatMap { $0.readPositions }
                pending.removeAll { partition, deletion in
                    guard let position = read.first(where: { $0.key.partition == partition })?.value,
                        position - (partitions[Int(partition)].committed ?? 0) >= Int64(deletion.after)
                    else { return false }
                    input.deleteRecords(partition: partition, below: deletion.to)
                    return true
                }
            }
            return Outcome(summary: try runner.finish(), error: nil)
        } catch {
            runner.abandon(error)
            return Outcome(summary: nil, error: "\(error)")
        }
    }
}
