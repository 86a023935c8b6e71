import RecordFormats
import Runner
import Windowing

extension GroupIdentity {
    /// What a run finds that says which pipeline wrote something it would go on from: at
    /// start-up (`GroupIdentityCheck`), and at an assignment or a read by the stages.
    package enum Evidence: Sendable {
        /// A commit on a partition of `topic` that the stage reading it would resume from: the
        /// group's on the input topic, or its aggregate stage's on the repartition topic.
        case commit(PartitionStart, topic: String)
        /// A record of the repartition topic, which names the group whose normalize stage wrote it.
        case repartitionRecord(writer: String, partition: Int32, offset: Int64)
        /// A task record of the state topic, which names the group it counts for and the input
        /// it counts (`ChangelogRecord.TaskState.group` and `source`).
        case stateTask(ChangelogRecord.TaskState, partition: Int32, offset: Int64)
    }

    /// Whether the pipeline may go on from what the evidence shows.
    package enum Judgement: Sendable, Equatable {
        case resume
        case refuse(PipelineError)

        /// Throws the refusal.
        package func get() throws(PipelineError) {
            if case .refuse(let refusal) = self { throw refusal }
        }
    }

    /// The one judge of whether the pipeline this identity asks for may go on from `evidence`,
    /// so that nothing is refused at one place and let through at another: at start-up
    /// (`GroupIdentityCheck`), at every assignment (the stages), of every repartition record
    /// (`RepartitionInput`) and of the line of state a task would go on with (`TaskChangelog`,
    /// which begins its own instead). A refusal exits 64: no restart mends it. `given`: how the
    /// run was given each setting, for a refusal to name it so (a stage names it by its value).
    package func judge(_ evidence: Evidence, given: [Setting: GivenSetting] = [:]) -> Judgement {
        switch evidence {
        case .commit(let start, let topic):
            return commitRefusal(start, topic: topic, given: given).map(Judgement.refuse) ?? .resume
        case .repartitionRecord(let writer, let partition, let offset):
            guard writer != group, let repartition = repartitionTopic else { return .resume }
            return .refuse(
                .settingChanged(
                    "the repartition topic \(repartition) holds records that group \(writer)'s normalize stage wrote (the record at offset \(offset) of \(repartition)[\(partition)]), and this run is group \(group): two groups writing one repartition topic would each count the other's hits, and this run counts none of them. Give this run a repartition topic of its own (\(given[.repartitionTopic]?.label ?? "--repartition-topic \(repartition)") now; by default it is <group>-repartition), or run it as --group \(writer); where both groups ran on it, stop the instances of both first"))
        case .stateTask(let task, let partition, let offset) where task.group != group:
            return .refuse(
                .settingChanged(
                    "the state topic \(stateTopic) holds the windows of group \(task.group) (the task record at offset \(offset) of \(stateTopic)[\(partition)] says so), and this run is group \(group): two groups keeping state in one topic would overwrite each other's windows, and a task of one could take the other's for its own. Give this run a state topic of its own (\(given[.stateTopic]?.label ?? "--state-topic \(stateTopic)") now; by default it is <group>-state), or run it as --group \(task.group)"))
        case .stateTask(let task, let partition, let offset):
            guard task.source != changelogSource else { return .resume }
            return .refuse(
                .settingChanged(
                    "the state topic \(stateTopic) holds windows group \(group) counted from another input than this run's (the task record at offset \(offset) of \(stateTopic)[\(partition)] counts another input topic, window size or mode; this run reads \(inputTopic ?? "its input")\(repartitionTopic.map { " through \($0)" } ?? " in one stage")): counting this input into it would mix two pipelines' windows under one group. Run this input under a --group of its own (its state topic follows the name), or run the group with the input it counts"))
        }
    }

    /// Why the stage that reads `topic` (the window stage: behind the shuffle, or of one stage;
    /// else the normalize stage) cannot resume from the group's commit `start`, if it cannot.
    /// Either stage: a commit that records another identity was made by another pipeline under
    /// the group's name; going on from it would mix two meanings of one output key or lose the
    /// other pipeline's hits. The normalize stage: a window checkpoint (the one-stage mode's,
    /// whose open windows are in that mode's state) and another version's checkpoint, which
    /// cannot be told, would skip hits the other pipeline has not counted; another tool's commit,
    /// or an offset reset, is taken (the operator chose it, and repeats are dropped downstream).
    /// The window stage: the normalize stage's commit holds no window state, and one without a
    /// window checkpoint this version reads, but at the very beginning of the partition (a full
    /// recount), was made by another tool or version; resuming from either would count only the
    /// hits after it, overwriting full records with partial ones.
    private func commitRefusal(_ start: PartitionStart, topic: String, given: [Setting: GivenSetting]) -> PipelineError? {
        guard let committed = start.committedOffset else { return nil }
        let behindShuffle = topic == repartitionTopic
        let evidence = "its \(behindShuffle ? "aggregate stage's " : "")commit on \(topic)[\(start.partition)]"
        // Each checkpoint decoded once: what it records, and which kind it is, follow from it.
        let checkpoint = Checkpoint(decoding: start.metadata, group: group)
        let sourceCheckpoint = checkpoint == nil ? SourceCheckpoint(decoding: start.metadata, group: group) : nil
        if let recorded = checkpoint?.identity ?? sourceCheckpoint?.identity,
            let refusal = recorded.refusal(asked: self, evidence: evidence, given: given)
        {
            return refusal
        }
        let windowCheckpoint = checkpoint != nil
        let otherVersion = Checkpoint.otherVersion(of: start.metadata) ?? SourceCheckpoint.otherVersion(of: start.metadata)
        guard behindShuffle || repartitionTopic == nil else {
            if windowCheckpoint {
                return .groupMismatch(
                    "the group's commit on \(topic)[\(start.partition)] carries a window checkpoint, whose open windows are in a window stage's state, where the normalize stage does not look. Resuming from it would skip hits whose windows were still open. Run two stages under a --group of their own (a new group counts the input from its beginning)")
            }
            guard let tag = otherVersion else { return nil }
            return .groupMismatch(
                "the group's commit on \(topic)[\(start.partition)] was made by another version of trackpipe, whose checkpoint (\(tag)) this one does not read (it reads \(SourceCheckpoint.format) and \(Checkpoint.format) only), so what the group is fixed to cannot be told. Run every instance of a deployment on one version; to go on with this one, run it under a new --group (a new group counts the input from its beginning), or reset this group's offsets of \(topic) to the earliest (kafka-consumer-groups.sh --reset-offsets --to-earliest) for a full recount")
        }
        if windowCheckpoint { return nil }
        let who: String
        if sourceCheckpoint != nil {
            who = "by trackpipe's normalize stage, whose commits hold no window state"
        } else {
            // A plain commit at the very beginning of the user's input is a full recount. The
            // repartition topic's beginning is where the last purge left it, not the group's
            // first record: there it would recount only what is left.
            guard !start.commitIsBeyondTheLog, behindShuffle || committed != (start.logStart ?? 0) else { return nil }
            who =
                if let otherVersion {
                    "by another version of trackpipe, whose checkpoint (\(otherVersion)) this one does not read (it reads \(Checkpoint.format) only)"
                } else {
                    "without a trackpipe checkpoint (by another tool, or by an offset reset)"
                }
        }
        let recount =
            behindShuffle
            ? " (the repartition topic is purged as it is counted, so its earliest offset is no full recount)"
            : ", or reset this group's offsets of \(topic) to the earliest (kafka-consumer-groups.sh --reset-offsets --to-earliest) for a full recount"
        return .groupMismatch(
            "the group's commit at offset \(committed) of \(topic)[\(start.partition)] was made \(who). Counting windows from it would miss the hits before it and overwrite full records with partial ones. Run this mode under a --group of its own (a new group counts the input from its beginning)\(recount)")
    }

    /// The refusal of a run asking for `asked`, whose commit (`evidence`: "its commit on
    /// hits[0]") recorded this identity; nil when they agree. Each difference is named as
    /// `given` says the run was told it (a setting missing there is named by its value only).
    private func refusal(asked: GroupIdentity, evidence: String, given: [Setting: GivenSetting]) -> PipelineError? {
        let differences = differences(from: asked)
        guard !differences.isEmpty else { return nil }
        let window = { (sizes: [Int64]) in WindowSize.text(sizes) }
        var found: [String] = []
        var why: [String] = []
        var back: [String] = []
        for setting in differences {
            let label = given[setting]?.label
            switch setting {
            case .window:
                found.append("it counts windows of \(window(windowSizes)) and this run asks for \(label ?? "windows of \(window(asked.windowSizes))")")
                let added = asked.windowSizes.filter { !windowSizes.contains($0) }
                let removed = windowSizes.filter { !asked.windowSizes.contains($0) }
                switch (added.isEmpty, removed.isEmpty) {
                case (false, true):
                    why.append("a size added to a running group would count from where its offsets stand, without every hit before; to count \(window(added)) from the input, replay it into a topic of its own (trackpipe replay --window \(window(added)) --output-topic <topic>), or run a new --group with every size")
                case (true, false):
                    why.append("the group's state holds windows of \(window(removed)) that a run without that size would neither finish nor write")
                default:
                    why.append("an output key <deliveryId>@<windowStart> names another window under each size, so records of two sizes would overwrite each other")
                }
                back.append(given[.window]?.label(for: window(windowSizes)) ?? "--window \(window(windowSizes))")
            case .inputKeyedByDelivery:
                let environment = given[.inputKeyedByDelivery]?.source == .environment
                if let repartition = repartitionTopic {
                    found.append("it runs two stages (its repartition topic is \(repartition)) and this run asks for one stage (\(label ?? "--input-keyed-by-delivery"))")
                    back.append(
                        (environment ? "TRACKPIPE_INPUT_KEYED_BY_DELIVERY=false" : "no --input-keyed-by-delivery")
                            + " with \(given[.repartitionTopic]?.label(for: repartition) ?? "--repartition-topic \(repartition)")")
                } else {
                    let asked = given[.inputKeyedByDelivery].flatMap { $0.source == .defaultValue ? nil : $0.label } ?? "no --input-keyed-by-delivery"
                    found.append("it runs one stage (--input-keyed-by-delivery) and this run asks for two stages (\(asked))")
                    back.append(environment ? "TRACKPIPE_INPUT_KEYED_BY_DELIVERY=true" : "--input-keyed-by-delivery")
                }
                why.append("the two modes commit and keep different things: one resuming from the other's commits would count partial windows and overwrite full records with partial ones")
            case .repartitionTopic:
                let repartition = repartitionTopic ?? ""
                found.append("its repartition topic is \(repartition) and this run asks for \(label ?? asked.repartitionTopic ?? "")")
                why.append("the group's input offsets say which hits reached its repartition topic: a run sending them to another would move those offsets on, and the group's own pipeline would never count the hits in between")
                back.append(given[.repartitionTopic]?.label(for: repartition) ?? "--repartition-topic \(repartition)")
            case .stateTopic:
                found.append("its state topic is \(stateTopic) and this run asks for \(label ?? asked.stateTopic)")
                why.append("its window tasks keep their open windows in its state topic: a run on another would start them empty and overwrite full records with partial ones")
                back.append(given[.stateTopic]?.label(for: stateTopic) ?? "--state-topic \(stateTopic)")
            }
        }
        return .settingChanged(
            "the group \(asked.group) runs another pipeline than this run asks for (\(evidence) says so): \(found.joined(separator: "; ")). One group is one pipeline: \(why.joined(separator: "; ")). Go back to the group's settings (\(back.joined(separator: ", "))), or run this pipeline under a new --group and a new --output-topic (a new group counts the input from its beginning)")
    }
}
