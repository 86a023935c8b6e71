import RecordFormats
import Runner
import Kafka
import Logging

/// The start-up's proof that a run is the pipeline its group is, before anything is joined or
/// written (`GroupIdentity`): every commit the group's stages made says what the group is fixed
/// to, and an internal topic says which group writes it.
///
/// What is read:
/// - the group's commits on the input topic (the normalize stage's, or the one stage's);
/// - with two stages, the aggregate group's commits on the repartition topic this run names, so
///   that a changed input topic, whose new partitions the group never committed, still finds
///   the group's settings;
/// - the newest repartition record of each partition of the repartition topic, and the newest
///   task record of each partition of the state topic, which name the group that wrote them:
///   a run of another group pointed at either would count the other's hits or overwrite its
///   windows.
///
/// The newest task records also say which input the group counted (`ChangelogRecord.source`):
/// one stage on another input topic commits nowhere the group did, yet its state topic tells it.
///
/// What cannot be told here (docs/windowing.md says it to users): a run under the same group
/// that shares no topic with the group's commits (another input topic and other internal
/// topics: a new pipeline under an old name; a two-stage pipeline started again after it stops
/// on its state, `AggregateTask.check`); instances of different settings started on a new group before
/// either committed (the first rebalance that hands one a partition the other committed stops
/// it, `AggregateTask.refusal`, `NormalizeStage.refusal`); two groups started on one new
/// internal topic before either wrote to it (an aggregate stage that reads the other's
/// repartition record stops on it, `RepartitionInput`; a task never continues another group's
/// state, `TaskChangelog`); and internal topics whose newest records are of another version of
/// trackpipe, or all older than `NewestRecords.bound` offsets behind others.
enum GroupIdentityCheck {
    /// The commits the check read, for the stages' own refusals (`NormalizeStage.refusal`,
    /// `AggregateTask.refusal`) before the groups are joined.
    struct Commits {
        /// The group's, on the input topic.
        var input: [PartitionStart]
        /// The aggregate group's, on the repartition topic (two stages; empty where the topic
        /// does not exist yet).
        var repartition: [PartitionStart]
    }

    /// Throws the refusal of a run that is not the pipeline its group is, or that points at an
    /// internal topic another group writes.
    static func check(config: PipelineConfig, inputPartitions: Int, admin: TopicAdmin, logger: Logger) throws -> Commits {
        let asked = config.identity
        let consumerLogger = logger.with(label: "trackpipe.kafka.consumer")
        var commits = Commits(input: [], repartition: [])
        commits.input = try GroupCommits.starts(group: config.group, topic: config.inputTopic, partitions: inputPartitions, consumerConfig: config.consumerConfig(group: config.group), logger: logger)
        for start in commits.input {
            if let refusal = GroupIdentity.recorded(in: start.metadata)?.refusal(
                group: config.group, asked: asked, evidence: "its commit on \(config.inputTopic)[\(start.partition)]", given: config.givenSettings)
            {
                throw refusal
            }
        }
        let repartition = config.effectiveRepartitionTopic
        let repartitions = asked.repartitionTopic == nil ? nil : try Pipeline.existingPartitionCount(of: repartition, admin: admin)
        if let repartitions {
            commits.repartition = try GroupCommits.starts(
                group: config.aggregateGroup, topic: repartition, partitions: repartitions, consumerConfig: config.consumerConfig(group: config.aggregateGroup), logger: logger)
            for start in commits.repartition {
                if let refusal = GroupIdentity.recorded(in: start.metadata)?.refusal(
                    group: config.group, asked: asked, evidence: "its aggregate stage's commit on \(repartition)[\(start.partition)]",
                    given: config.givenSettings)
                {
                    throw refusal
                }
            }
        }
        let reader = config.consumerConfig(group: config.group)
        if let repartitions {
            let writers = try NewestRecords.find(in: repartition, partitions: repartitions, consumerConfig: reader, logger: consumerLogger) {
                record in record.value.flatMap { try? RepartitionRecord.origin(of: $0).group }
            }
            if let (partition, other) = Self.otherWriter(writers, than: config.group) {
                throw PipelineError.settingChanged(
                    "the repartition topic \(repartition) carries the hits of group \(other) (the newest record of \(repartition)[\(partition)] was written by its normalize stage), and this run is group \(config.group): two groups writing one repartition topic would each count the other's hits. Give this run a repartition topic of its own (\(config.givenSetting(.repartitionTopic).label) now; by default it is <group>-repartition), or run it as --group \(other)")
            }
        }
        try checkStateTopic(config: config, admin: admin, reader: reader, logger: consumerLogger)
        return commits
    }

    /// The newest task record of each partition of the state topic names the group that wrote
    /// it, and the input it counted: another group's state, or this group's of another input, is
    /// refused.
    private static func checkStateTopic(config: PipelineConfig, admin: TopicAdmin, reader: KafkaConfig, logger consumerLogger: Logger) throws {
        let asked = config.identity
        let state = asked.stateTopic
        if let states = try Pipeline.existingPartitionCount(of: state, admin: admin) {
            let tasks = try NewestRecords.find(in: state, partitions: states, consumerConfig: reader, logger: consumerLogger) {
                (record: ConsumerRecord) -> ChangelogRecord.TaskState? in
                guard let key = record.key, key.elementsEqual(ChangelogRecord.encodeKey(.task)), let value = record.value else { return nil }
                return try? ChangelogRecord.decodeTask(Array(value))
            }
            let owners = tasks.mapValues { found -> NewestRecords.Found<String> in
                if case .recognised(let task, let offset) = found { return .recognised(task.group, offset: offset) }
                return .absent
            }
            // The group's own state, counted from another input: one stage on another input
            // topic commits nowhere the group did, but its task records name what they count.
            let source = ChangelogRecord.source(crossesShuffle: asked.repartitionTopic != nil, inputTopic: config.inputTopic, windowSize: asked.windowSize)
            for partition in tasks.keys.sorted() {
                guard case .recognised(let task, _) = tasks[partition], task.group == config.group, task.source != source else { continue }
                throw PipelineError.settingChanged(
                    "the state topic \(state) holds windows group \(config.group) counted from another input than this run's (the newest task record of \(state)[\(partition)] counts another input topic, window size or mode; this run reads \(config.inputTopic)\(asked.repartitionTopic == nil ? " in one stage" : " through \(config.effectiveRepartitionTopic)")): counting this input into it would mix two pipelines' windows under one group. Run this input under a --group of its own (its state topic follows the name), or run the group with the input it counts")
            }
            if let (partition, other) = Self.otherWriter(owners, than: config.group) {
                throw PipelineError.settingChanged(
                    "the state topic \(state) holds the windows of group \(other) (the newest task record of \(state)[\(partition)] says so), and this run is group \(config.group): two groups keeping state in one topic would overwrite each other's windows, and a task of one could take the other's for its own. Give this run a state topic of its own (\(config.givenSetting(.stateTopic).label) now; by default it is <group>-state), or run it as --group \(other)")
            }
        }
    }

    /// The first partition (by number) whose newest recognised record names another writer.
    private static func otherWriter(_ found: [Int32: NewestRecords.Found<String>], than group: String) -> (Int32, String)? {
        for partition in found.keys.sorted() {
            if case .recognised(let writer, _) = found[partition], writer != group { return (partition, writer) }
        }
        return nil
    }
}
