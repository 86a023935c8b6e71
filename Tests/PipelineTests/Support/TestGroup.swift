import Kafka
import TrackingDomain
@testable import Pipeline
@testable import RecordFormats
import Windowing

/// The group the stage tests run as, `g`, and what it is fixed to: the tests of a stage's
/// counting build stages, checkpoints and records as before, fixed to the window size they count
/// and to `g`'s internal topics; the tests of the identity itself pass their own.
enum TestGroup {
    static let name = "g"
    static let repartitionTopic = "g-repartition"
    static let stateTopic = "g-state"

    /// `input`: the input topic, as a stage knows it (nil: as a checkpoint records it, without).
    static func twoStages(window: Int64 = 60_000, input: String? = nil) -> GroupIdentity {
        GroupIdentity(group: name, inputTopic: input, windowSizes: [window], repartitionTopic: repartitionTopic, stateTopic: stateTopic)
    }

    static func oneStage(window: Int64 = 60_000, input: String? = nil) -> GroupIdentity {
        GroupIdentity(group: name, inputTopic: input, windowSizes: [window], repartitionTopic: nil, stateTopic: stateTopic)
    }
}

extension AggregateStage {
    /// A stage of the test group, in the mode its input implies.
    init(sourceTopic: String, input: Input, window: WindowConfig, shards: Int) {
        let identity =
            Input.self == RawHitInput.self
            ? TestGroup.oneStage(window: window.lengths[0], input: sourceTopic) : TestGroup.twoStages(window: window.lengths[0], input: sourceTopic)
        self.init(input: input, window: window, shards: shards, identity: identity)
    }
}

extension RepartitionInput {
    /// The repartition topic of the test group.
    init(partitionCount: Int32) {
        self.init(partitionCount: partitionCount, identity: TestGroup.twoStages())
    }
}

extension NormalizeStage {
    /// A normalize stage of the test group, fixed to 1-minute windows; its originals rule for
    /// the default windows unless told another.
    init(
        inputTopic: String, sourcePartitions: Int, repartitionPartitions: Int32, limits: NormalizerLimits, maxFutureSkew: Int64,
        idleTimeout: Int64, markInterval: Int64 = 500, shards: Int = 1, batchBytes: Int = RepartitionRecord.batchBytes,
        maxOriginalBytes: Int = .max, originals: OriginalRule = OriginalRule(window: WindowConfig())
    ) {
        self.init(
            sourcePartitions: sourcePartitions, repartitionPartitions: repartitionPartitions, identity: TestGroup.twoStages(input: inputTopic), limits: limits, maxFutureSkew: maxFutureSkew, idleTimeout: idleTimeout,
            markInterval: markInterval, shards: shards, batchBytes: batchBytes, maxOriginalBytes: maxOriginalBytes,
            originals: originals)
    }
}

extension Checkpoint {
    /// A checkpoint of the test group's two stages, of windows of `windowSize`.
    init(
        evictedBefore: Int64, processedMark: Int64, seen: [Int32: SourceFloor] = [:], changelog: Int64, changelogSince: Int64 = 0,
        windowSize: Int64
    ) {
        self.init(
            evictedBefore: evictedBefore, processedMark: processedMark, seen: seen, changelog: changelog, changelogSince: changelogSince,
            identity: TestGroup.twoStages(window: windowSize))
    }

    /// A checkpoint the test group committed.
    init?(decoding text: String?) {
        self.init(decoding: text, group: TestGroup.name)
    }
}

extension SourceCheckpoint {
    /// A normalize stage's checkpoint of the test group.
    init(epoch: UInt32, progress: Int64? = nil) {
        self.init(epoch: epoch, progress: progress, identity: TestGroup.twoStages())
    }

    /// A normalize stage's checkpoint the test group committed.
    init?(decoding text: String?) {
        self.init(decoding: text, group: TestGroup.name)
    }
}

extension RepartitionRecord.Origin {
    /// Records of the test group's normalize stage.
    init(sourceTopic: String, sourcePartitions: Int, routedPartitions: Int) {
        self.init(sourceTopic: sourceTopic, sourcePartitions: sourcePartitions, routedPartitions: routedPartitions, group: TestGroup.name)
    }
}

extension TaskChangelog {
    /// The changelog of a task of the test group's two stages.
    init() {
        self.init(identity: TestGroup.twoStages(), partition: 0)
    }
}
