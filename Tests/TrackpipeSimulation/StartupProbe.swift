import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import Windowing

/// The start-up's identity check (`GroupIdentityCheck`), run as `Pipeline.run` runs it before it
/// joins anything, against the simulated cluster and through the clients a worker process gets
/// from it (`ProcessClients`): the commits, log bounds and newest records it reads come from
/// the simulated consumer. The cluster holds what group `g1` left there, written with the real
/// encoders. The tests of the judge at start-up use it (Tests/PipelineTests/SimulationTests.swift).
public enum StartupProbe {
    /// `g1`: two stages reading `hits` (4 partitions) in windows of a minute, through
    /// `g1-repartition` (2 partitions), its state in `g1-state` (2 partitions).
    static let g1 = GroupIdentity(group: "g1", inputTopic: "hits", windowSizes: [60_000], repartitionTopic: "g1-repartition", stateTopic: "g1-state")

    /// What `g1` left (and an input it never read, `hits-b`): its normalize stage's commit on every input partition, its aggregate
    /// stage's on every repartition partition, a marks record of its normalize stage in every
    /// repartition partition, and a task record in every state partition, the newest behind
    /// another program's record in partition 1 of each.
    static func cluster() -> SimulatedCluster {
        let kafka = InMemoryKafka()
        let stamp = WriteStamp(time: 0, writer: -1, outputCrashes: 0)
        let hits = kafka.create("hits", partitions: 4)
        kafka.create("hits-b", partitions: 4)
        for partition in Int32(0)..<4 {
            for offset in 0..<3 { hits.append(partition: partition, key: nil, value: Array("hit \(offset)".utf8), timestamp: 0, stamp: stamp) }
            kafka.commit(group: "g1", topic: "hits", partition: partition, .init(offset: 3, metadata: SourceCheckpoint(epoch: 0, identity: g1).encoded))
        }
        let origin = RepartitionRecord.Origin(sourceTopic: "hits", sourcePartitions: 4, routedPartitions: 2, group: "g1")
        var marks: [UInt8] = []
        RepartitionRecord.encodeMarks((0..<4).map { SourceMark(source: $0, watermark: 0) }, epochs: [0, 0, 0, 0], origin: origin, writerClock: 0, into: &marks)
        var task = ChangelogRecord.TaskState(processedMark: 1, evictedBefore: 0, source: g1.changelogSource)
        task.group = "g1"
        let (taskKey, taskValue) = ChangelogRecord.Entry.task(task).encoded
        let records: [(topic: String, key: [UInt8]?, value: [UInt8])] = [("g1-repartition", nil, marks), ("g1-state", taskKey, taskValue ?? [])]
        for record in records {
            let log = kafka.create(record.topic, partitions: 2)
            for partition in Int32(0)..<2 {
                log.append(partition: partition, key: record.key, value: record.value, timestamp: 0, stamp: stamp)
                if partition == 1 { log.append(partition: partition, key: nil, value: Array("another program's".utf8), timestamp: 0, stamp: stamp) }
            }
        }
        for partition in Int32(0)..<2 {
            let checkpoint = Checkpoint(evictedBefore: 0, processedMark: 1, changelog: 1, identity: g1)
            kafka.commit(group: "g1-aggregate", topic: "g1-repartition", partition: partition, .init(offset: 1, metadata: checkpoint.encoded))
        }
        return SimulatedCluster(kafka: kafka, now: 0)
    }

    /// Why `Pipeline.run` refuses to start a run of `config` on what `g1` left, nil if it starts;
    /// the partition counts as `Pipeline` reads them (`TopicAdmin`), the rest through the seam.
    public static func refusal(of config: PipelineConfig) -> String? { check(config).refusal }

    /// The identity check of `config` on what `g1` left: its refusal, if any, and how many
    /// consumers it made through the seam (each a client, with its connections, in a worker).
    public static func check(_ config: PipelineConfig) -> (refusal: String?, consumers: Int) {
        let cluster = Self.cluster()
        let clients = ProcessClients(cluster: cluster)
        do {
            try TopicReader.using(
                config: config.consumerConfig(group: config.group), clients: clients, logger: Logger(label: "trackpipe.probe") { _ in SwiftLogNoOpLogHandler() }
            ) { reader in
                try GroupIdentityCheck.check(
                    config: config, inputPartitions: cluster.kafka.topic(config.inputTopic).partitionCount,
                    repartitionPartitions: cluster.kafka.topics[config.effectiveRepartitionTopic]?.partitionCount,
                    statePartitions: cluster.kafka.topics[config.effectiveStateTopic]?.partitionCount, reader: reader)
            }
            return (nil, clients.consumersMade)
        } catch {
            return ("\(error)", clients.consumersMade)
        }
    }
}
