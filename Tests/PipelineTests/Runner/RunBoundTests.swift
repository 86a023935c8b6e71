import Kafka
import Logging
import Testing
@testable import Pipeline
@testable import Runner

/// When a bounded run is done: every partition of its input read to its end, by this run.
@Suite("run bound: a bounded run reads every partition of its input")
struct RunBoundTests {
    static let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    static func context(_ settings: RunnerSettings) -> RunnerContext {
        RunnerContext(stageName: "aggregate", settings: settings, logger: logger, metrics: nil)
    }

    static func settings(_ bound: RunnerSettings.Bound, partitions: Int?) -> RunnerSettings {
        var settings = RunnerSettings(
            topic: "g-repartition", assignment: .group, bound: bound, consumer: KafkaConfig(["session.timeout.ms": "6000"]),
            producer: KafkaConfig([:]), destinations: [:], commitInterval: 5_000)
        settings.partitionCount = partitions
        return settings
    }

    @Test("a window stage that owns no partition when its upstream finishes still takes its bound, waits out a rebalance, then refuses: it never waits forever nor ends empty")
    func owningNothingWhenUpstreamFinishes() {
        let upstream = UpstreamSignal()
        var bound = RunBound(Self.context(Self.settings(.endWhenUpstreamFinishes(upstream), partitions: 2)))
        let tracker = PartitionTracker(topic: "g-repartition")
        #expect(bound.upstreamBound(tracker) == nil, "the upstream has not finished")
        upstream.finish()
        #expect(bound.upstreamBound(tracker) == [], "taken, though nothing is owned")
        #expect(bound.endsAreDue && !bound.isReached(tracker), "an empty run is not done")
        #expect(bound.awaitOthers(now: 0, tracker: tracker, assigned: true, logger: Self.logger) == nil, "waits first")
        #expect(bound.awaitOthers(now: 11_999, tracker: tracker, assigned: true, logger: Self.logger) == nil)
        let refusal = bound.awaitOthers(now: 12_000, tracker: tracker, assigned: true, logger: Self.logger)
        #expect(refusal?.exitCode == 64 && "\(refusal.map { "\($0)" } ?? "")".contains("partitions [0, 1] of g-repartition"), "\(String(describing: refusal))")
    }

    @Test("without a partition count (a fixed assignment) an empty runner takes no bound and refuses nothing")
    func fixedAssignment() {
        let upstream = UpstreamSignal()
        upstream.finish()
        var bound = RunBound(Self.context(Self.settings(.endWhenUpstreamFinishes(upstream), partitions: nil)))
        let tracker = PartitionTracker(topic: "g-repartition")
        #expect(bound.upstreamBound(tracker) == nil)
        #expect(bound.awaitOthers(now: 100_000, tracker: tracker, assigned: true, logger: Self.logger) == nil)
    }
}
