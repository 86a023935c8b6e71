import Kafka

/// Every failure a run can stop with, each with the exit code it stops with: one place where
/// a refusal is told from a failure a restart may cure.
public enum PipelineError: Error, CustomStringConvertible, Equatable {
    case configuration(String)
    case deliveryFailed(String)
    case inputTopicMissing(String)
    case repartitionTopicMissing(topic: String, partitions: Int, brokers: String, reason: String)
    case stateTopicMissing(topic: String, partitions: Int, brokers: String, reason: String)
    /// The state topic has another partition count than the window tasks' input.
    case stateTopicMismatch(topic: String, has: Int, needs: Int)
    /// The group's commits were made by another mode of trackpipe, or by another tool, and
    /// resuming from them would lose counts.
    case groupMismatch(String)
    /// Instances route the repartition topic by different partition counts.
    case routingMismatch(String)
    /// The group's state or the output topic was counted with another setting that decides what
    /// a key means (the window size): going on would mix results. A configuration error.
    case settingChanged(String)
    /// An internal topic's settings would lose what the worker needs (`InternalTopicCheck`): a
    /// configuration error, with the command that fixes it.
    case topicSettings(String)
    case kafka(String)
    /// Writing `replay --output-file` failed part way (a full disk, a closed pipe): the file is
    /// incomplete. Not a setting to change, so it exits 1 like any other failure of a run.
    case outputFileFailed(String)
    /// No broker answered: the start-up waits and asks again (never shown as a failure).
    case clusterUnreachable(String)

    public var description: String {
        switch self {
        case .configuration(let text): "configuration: \(text)"
        case .deliveryFailed(let text):
            "a record could not be delivered: \(text). Nothing after the last safe commit was committed; restart to read on from there."
        case .inputTopicMissing(let topic):
            "the input topic \(topic) does not exist on the cluster: create it (or check --brokers and --input-topic)"
        case .repartitionTopicMissing(let topic, let partitions, let brokers, let reason):
            "the repartition topic \(topic) does not exist and could not be created (\(reason)). Create it with as many partitions as the input topic, then start again: kafka-topics.sh --bootstrap-server \(brokers) --create --topic \(topic) --partitions \(partitions) --config retention.ms=604800000 (or pass --input-keyed-by-delivery if the input is keyed by deliveryId)"
        case .stateTopicMissing(let topic, let partitions, let brokers, let reason):
            "the state topic \(topic) does not exist and could not be created (\(reason)). Create it compacted, with as many partitions as the window tasks' input, then start again: kafka-topics.sh --bootstrap-server \(brokers) --create --topic \(topic) --partitions \(partitions) --config cleanup.policy=compact"
        case .stateTopicMismatch(let topic, let has, let needs):
            "the state topic \(topic) has \(has) partitions, but the window tasks' input has \(needs): each task keeps its state in the partition of its own number, so the counts must be equal. Point --state-topic at the topic this group has used, or, for a new deployment, give it a new one with \(needs) partitions (cleanup.policy=compact) or none and let trackpipe create it"
        case .groupMismatch(let text): "this consumer group cannot be resumed by this stage: \(text)."
        case .routingMismatch(let text): text
        case .settingChanged(let text): "configuration: \(text)."
        case .topicSettings(let text): "configuration: \(text)"
        case .kafka(let text): text
        case .outputFileFailed(let text): "\(text); the output is incomplete: make room (or keep the reader open) and run the replay again"
        case .clusterUnreachable(let text): "no Kafka broker answered: \(text)"
        }
    }

    /// The exit code of `run` or `replay` stopped by this error: 64 (EX_USAGE) for a refusal, a
    /// setting or a group to change before starting again, which waiting or a restart cannot fix
    /// and a scheduler should not retry (another mode's or run's commits or state under the
    /// group, internal topics whose partition counts disagree); 1 for every other failure.
    public var exitCode: Int32 {
        switch self {
        case .configuration, .settingChanged, .topicSettings, .stateTopicMismatch, .groupMismatch, .routingMismatch: 64
        case .deliveryFailed, .inputTopicMissing, .repartitionTopicMissing, .stateTopicMissing, .kafka, .outputFileFailed,
            .clusterUnreachable:
            1
        }
    }

    /// Whether `error` means that no broker answered (waited out), rather than an answer that
    /// says something is wrong (thrown).
    public static func isUnanswered(_ error: any Error) -> Bool {
        if case PipelineError.clusterUnreachable = error { return true }
        return (error as? KafkaError)?.severity == .transient
    }

    /// The exit code of `run` or `replay` stopped by `error`, a `PipelineError` or not.
    public static func exitCode(for error: any Error) -> Int32 { (error as? PipelineError)?.exitCode ?? 1 }
}
