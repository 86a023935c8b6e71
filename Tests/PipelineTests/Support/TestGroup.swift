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

    static func twoStages(window: Int64 = 60_000) -> GroupIdentity {
        GroupIdentity(windowSize: window, repartitionTopic: repartitionTopic, stateTopic: stateTopic)
    }

    static func oneStage(window: Int64 = 60_000) -> GroupIdentity {
        GroupIdentity(windowSize: window, repartitionTopic: nil, stateTopic: stateTopic)
    }
}

extension AggregateStage {
    /// A stage of the test group, in the mode its input implies.
    init(sourceTopic: String, input: Input, window: WindowConfig, shards: Int) {
        let identity = Input.self == RawHitInput.self ? TestGroup.oneStage(window: window.size) : TestGroup.twoStages(window: window.size)
        self.init(sourceTopic: sourceTopic, input: input, window: window, shards: shards, identity: identity, group: TestGroup.name)
    }
}

extension RepartitionInput {
    /// The repartition topic of the test group.
    init(partitionCount: Int32) {
        self.init(partitionCount: partitionCount, group: TestGroup.name)
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
            inputTopic: inputTopic, sourcePartitions: sourcePartitions, repartitionPartitions: repartitionPartitions,
            identity: TestGroup.twoStages(), group: TestGroup.name, limits: limits, maxFutureSkew: maxFutureSkew, idleTimeout: idleTimeout,
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
}

extension SourceCheckpoint {
    /// A normalize stage's checkpoint of the test group.
    init(epoch: UInt32, progress: Int64? = nil) {
        self.init(epoch: epoch, progress: progress, identity: TestGroup.twoStages())
    }
}

extension RepartitionRecord.Origin {
    /// Records of the test group's normalize stage.
    init(sourceTopic: String, sourcePartitions: Int, routedPartitions: Int) {
        self.init(sourceTopic: sourceTopic, sourcePartitions: sourcePartitions, routedPartitions: routedPartitions, group: TestGroup.name)
    }
}

extension TaskChangelog {
    /// A restore of a task of the test group.
    mutating func beginRestore(_ lineage: Lineage, source: UInt64) {
        beginRestore(lineage, source: source, group: TestGroup.name)
    }
}
