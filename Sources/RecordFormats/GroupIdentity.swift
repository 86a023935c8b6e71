/// One group is one pipeline: what a group is fixed to once it has committed, recorded in the
/// commits of both of its stages (the normalize stage's `SourceCheckpoint`, the window stage's
/// `Checkpoint`), and judged by one judge (`GroupIdentity.judge`, in the Pipeline module) at
/// start-up, before anything is joined or written, and at every assignment. A run that differs
/// in any of it would not go on with the group's pipeline but start another one under its name:
/// with another set of window sizes, records of two sizes under one output key, or a size whose
/// windows would begin wherever the group's offsets stand, short of every hit before; with other internal
/// topics, the group's input offsets taken away from its own pipeline, whose hits in between
/// nobody counts; with the other mode, state and commits that mean something else. Kafka
/// Streams ties an application id to one topology the same way (docs/windowing.md, "What a
/// group and an output topic are fixed to").
///
/// The repartition topic's partition count and the input's incarnations are fixed too, and
/// checked where they are known: in each repartition record (`RepartitionRecord.Origin`) and in
/// the duplicate floors of each checkpoint.
public struct GroupIdentity: Sendable, Hashable {
    /// The group (`--group`): the normalize stage's, or the one stage's; its aggregate stage's is
    /// `<group>-aggregate`. No commit records it: a commit is under its group.
    public var group: String
    /// The topic of raw hits; nil where it is not known (no commit records it). A group is not
    /// fixed to it: two stages may switch to another input, and one stage's state says which
    /// input it counted (`changelogSource`).
    public var inputTopic: String?
    /// The window sizes (ms), ascending: an output key `<deliveryId>@<windowStart>` names
    /// another window under each size, and a size added to a running group would count only
    /// from where its offsets stand.
    public var windowSizes: [Int64]
    /// The topic between the two stages; nil: one stage (`--input-keyed-by-delivery`), the
    /// input windowed directly.
    public var repartitionTopic: String?
    /// The compacted topic the window tasks keep their state in.
    public var stateTopic: String

    public init(group: String, inputTopic: String?, windowSizes: [Int64], repartitionTopic: String?, stateTopic: String) {
        (self.group, self.inputTopic, self.windowSizes) = (group, inputTopic, windowSizes.sorted())
        (self.repartitionTopic, self.stateTopic) = (repartitionTopic, stateTopic)
    }

    /// What a window task of this pipeline counts, as its task records name it
    /// (`ChangelogRecord.source`): behind the shuffle the repartition topic, whatever the input.
    package var changelogSource: UInt64 {
        ChangelogRecord.source(crossesShuffle: repartitionTopic != nil, inputTopic: inputTopic ?? "", windowSizes: windowSizes)
    }

    /// A setting the identity holds, as `trackpipe run` takes it.
    public enum Setting: String, Sendable, CaseIterable {
        case window
        case inputKeyedByDelivery = "input-keyed-by-delivery"
        case repartitionTopic = "repartition-topic"
        case stateTopic = "state-topic"
    }

    /// The settings in which `other` differs from this identity. A different mode is one
    /// difference, not also a different repartition topic.
    package func differences(from other: GroupIdentity) -> [Setting] {
        var found: [Setting] = []
        if windowSizes != other.windowSizes { found.append(.window) }
        if (repartitionTopic == nil) != (other.repartitionTopic == nil) {
            found.append(.inputKeyedByDelivery)
        } else if repartitionTopic != other.repartitionTopic {
            found.append(.repartitionTopic)
        }
        if stateTopic != other.stateTopic { found.append(.stateTopic) }
        return found
    }

    // MARK: In commit metadata

    /// The fields checkpoints carry: `window=<ms>[,<ms>…] stages=1 state=<topic>`, or
    /// `window=<ms>[,<ms>…] stages=2 repartition=<topic> state=<topic>`. Topic names hold no spaces or
    /// `=` (Kafka takes `[a-zA-Z0-9._-]`, and `PipelineConfig.validate` refuses others).
    var encodedFields: String {
        "window=\(windowSizes.map(String.init).joined(separator: ","))" + (repartitionTopic.map { " stages=2 repartition=\($0)" } ?? " stages=1") + " state=\(stateTopic)"
    }

    /// The identity of a checkpoint's fields (`name` to value) under `group`, the group the
    /// commit is under; nil if one is missing or does not fit the others.
    init?(fields: [Substring: Substring], group: String) {
        let sizes = fields["window"].map { $0.split(separator: ",", omittingEmptySubsequences: false).map { Int64($0) } } ?? []
        guard !sizes.isEmpty, !sizes.contains(where: { ($0 ?? 0) <= 0 }), let state = fields["state"], !state.isEmpty else { return nil }
        switch fields["stages"] {
        case "1":
            guard fields["repartition"] == nil else { return nil }
            self.init(group: group, inputTopic: nil, windowSizes: sizes.compactMap { $0 }, repartitionTopic: nil, stateTopic: String(state))
        case "2":
            guard let repartition = fields["repartition"], !repartition.isEmpty else { return nil }
            self.init(group: group, inputTopic: nil, windowSizes: sizes.compactMap { $0 }, repartitionTopic: String(repartition), stateTopic: String(state))
        default:
            return nil
        }
    }
}
