import Kafka

/// The librdkafka properties trackpipe keeps for itself: its guarantees or its group's identity
/// rest on their values, so `-X` (and `TRACKPIPE_X*`) may not change them. One judge, `refusal`,
/// which every command that takes `-X` reaches through `PipelineConfig.checkKafkaProperties`.
///
/// A value is read as librdkafka reads it, not as it is spelt: librdkafka takes `t`, `TRUE` and
/// `1` for true, `F` and `0` for false, `LATEST` and `end` for the end of a partition, and strips
/// a `topic.` prefix from a topic-level property. A refusal that compared spellings would let
/// `enable.idempotence=f` or `topic.auto.offset.reset=latest` through (both were tried).
enum ReservedProperty: String, CaseIterable, Sendable {
    case groupId = "group.id"
    case groupInstanceId = "group.instance.id"
    case autoCommit = "enable.auto.commit"
    case autoOffsetStore = "enable.auto.offset.store"
    case idempotence = "enable.idempotence"
    case offsetReset = "auto.offset.reset"
    case partitionEOF = "enable.partition.eof"

    /// The reserved property `key` sets, as librdkafka resolves the name; nil for any other.
    init?(key: String) {
        self.init(rawValue: key.hasPrefix("topic.") ? String(key.dropFirst("topic.".count)) : key)
    }

    /// Why `value` is refused and what to do instead; nil for the value trackpipe sets anyway.
    func refusal(of value: String) -> String? {
        switch self {
        case .groupId:
            return "the group is part of the pipeline's identity and trackpipe names it: use --group (TRACKPIPE_GROUP). As a property it would reach both stages, whose groups differ (<group> and <group>-aggregate), and every reader of commits; remove it"
        case .groupInstanceId:
            return "as a property it would reach every consumer trackpipe makes (those that only read commits or state included) and give both stages one id; use --instance-id (TRACKPIPE_INSTANCE_ID), which gives each stage's consumer its own (<id>-normalize, <id>-aggregate); remove it"
        case .autoCommit, .autoOffsetStore:
            guard Self.boolean(value) != false else { return nil }
            return "trackpipe commits only offsets below its safe mark; automatic commits would lose hits after a crash; remove it"
        case .idempotence:
            guard Self.boolean(value) == false else { return nil }
            return "the aggregate stage recognises events sent twice by their input position, which needs each partition's records in the order they were sent; without the idempotent producer a retried send can overtake a later one, and a hit would be dropped as a copy; remove it"
        case .offsetReset:
            guard !["earliest", "smallest", "beginning"].contains(value.lowercased()) else { return nil }
            return "a new group starts wherever its input begins, and a consumer sent out of range goes on from the log start, so that what retention took is reported lost; any other reset skips records the log still holds without a word; remove it"
        case .partitionEOF:
            guard Self.boolean(value) == false else { return nil }
            return "trackpipe learns from these events that a partition is read to its end: a bounded run (--until-end, replay) would never see an empty partition end; remove it"
        }
    }

    /// The first refusal among `properties`, in key order, so that a run names the same one each
    /// time.
    static func judge(_ properties: [String: String]) throws(KafkaConfigProblem) {
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            guard let reserved = Self(key: key), let reason = reserved.refusal(of: value) else { continue }
            throw KafkaConfigProblem(properties: [key], reason: reason)
        }
    }

    /// A boolean as librdkafka reads one; nil for what it would refuse itself (its own check
    /// follows this one).
    static func boolean(_ value: String) -> Bool? {
        switch value.lowercased() {
        case "true", "t", "1": true
        case "false", "f", "0": false
        default: nil
        }
    }
}
