import RecordFormats
import Runner
import Kafka

/// The start-up's proof that a run is the pipeline its group is, before anything is joined or
/// written (`GroupIdentity`): every commit the group's stages made says what the group is fixed
/// to, and an internal topic says which group writes it; the stages' judge judges each. It reads
/// through the client seam (`TopicReader`), so that the simulated cluster can drive it too.
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
/// on its state, `AggregateTask.check`); instances of different settings started on a new group
/// before either committed (the first rebalance that hands one a partition the other committed
/// stops it: the stages ask the judge of every commit they are assigned); two groups started on
/// one new internal topic before either wrote to it (an aggregate stage that reads the other's
/// repartition record stops on it, `RepartitionInput`; a task never continues another group's
/// state, `TaskChangelog`: both ask the judge); and internal topics whose newest records are of
/// another version of trackpipe, or all older than `NewestRecords.bound` offsets behind others.
package enum GroupIdentityCheck {
    /// Throws the judge's refusal (`GroupIdentity.judge`) of the first evidence it refuses, in
    /// the order above, each read once the one before is judged, all through `reader` (a consumer
    /// of the group's `group.id`, which the caller's other start-up checks share; the aggregate
    /// group's commits are asked of that group's coordinator through it). The topics' partition
    /// counts are the caller's to read (`TopicAdmin`, which the client seam does not cover): nil
    /// for an internal topic that does not exist yet.
    package static func check(
        config: PipelineConfig, inputPartitions: Int, repartitionPartitions: Int?, statePartitions: Int?, reader: TopicReader
    ) throws {
        let identity = config.identity
        let given = config.givenSettings
        func hear(_ evidence: [GroupIdentity.Evidence]) throws {
            for item in evidence { try identity.judge(item, given: given).get() }
        }
        try hear(
            try GroupCommits.starts(topic: config.inputTopic, partitions: inputPartitions, reader: reader.consumer())
                .map { .commit($0, topic: config.inputTopic) })
        if let repartition = identity.repartitionTopic, let count = repartitionPartitions {
            try hear(
                try GroupCommits.starts(of: config.aggregateGroup, topic: repartition, partitions: count, reader: reader.consumer())
                    .map { .commit($0, topic: repartition) })
            let writers = try NewestRecords.find(in: repartition, partitions: count, reader: reader) {
                record in record.value.flatMap { try? RepartitionRecord.origin(of: $0).group }
            }
            try hear(newest(writers) { .repartitionRecord(writer: $0, partition: $1, offset: $2) })
        }
        if let count = statePartitions {
            let tasks = try NewestRecords.find(in: identity.stateTopic, partitions: count, reader: reader) {
                record -> ChangelogRecord.TaskState? in
                guard let key = record.key, key.elementsEqual(ChangelogRecord.encodeKey(.task)), let value = record.value else { return nil }
                return try? ChangelogRecord.decodeTask(Array(value))
            }
            try hear(newest(tasks) { .stateTask($0, partition: $1, offset: $2) })
        }
    }

    /// The evidence of each partition's newest recognised record, by partition; what cannot be
    /// told is no evidence.
    private static func newest<Value>(
        _ found: [Int32: NewestRecords.Found<Value>], _ evidence: (Value, Int32, Int64) -> GroupIdentity.Evidence
    ) -> [GroupIdentity.Evidence] {
        found.keys.sorted().compactMap { partition in
            guard case .recognised(let value, let offset) = found[partition] else { return nil }
            return evidence(value, partition, offset)
        }
    }
}
