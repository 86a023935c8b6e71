import Kafka
import Logging
import Testing
@testable import Pipeline
@testable import Runner

/// The ration of commits made because windows closed: what keeps a live stream's windows fresh
/// and a backlog from being read at commit speed.
@Suite("commit coordinator: early commits for closed windows")
struct CommitCoordinatorTests {
    func coordinator(_ assignment: RunnerSettings.Assignment = .group) -> CommitCoordinator {
        let settings = RunnerSettings(
            topic: "hits", assignment: assignment, bound: .unbounded, consumer: KafkaConfig([:]), producer: KafkaConfig([:]),
            destinations: [:], commitInterval: 5_000)
        return CommitCoordinator(RunnerContext(stageName: "aggregate", settings: settings, logger: Logger(label: "test"), metrics: nil))
    }

    @Test("none right after an assignment (a backlog), one a second while windows keep closing, and a burst of four after a quiet minute")
    func ration() {
        var committer = coordinator()
        committer.begin(at: 0)
        committer.groupAssigned(at: 3_000)
        // A backlog right after the assignment: windows close every turn.
        let backlog = stride(from: Int64(3_000), to: 8_000, by: 50).filter { committer.takeEarlyCommit(now: $0) }
        #expect(backlog == [4_000, 5_000, 6_000, 7_000], "one a second, the first a second after the assignment")
        // A live stream: a minute without closings, then the tasks close the next window in
        // several turns within half a second: each commits at once.
        let boundary = (0..<5).map { Int64(68_000 + $0 * 100) }.filter { committer.takeEarlyCommit(now: $0) }
        #expect(boundary == [68_000, 68_100, 68_200, 68_300], "four at once, the fifth waits")
        // A rebalance empties the ration again.
        committer.groupAssigned(at: 130_000)
        let afterRebalance = committer.takeEarlyCommit(now: 130_500)
        #expect(!afterRebalance)
    }

    @Test("a runner of a fixed assignment (replay) has no group to commit to: no commit is ever due, not even an early one")
    func noCommits() {
        var committer = coordinator(.fixed([TopicPartitionOffset(TopicPartition(topic: "hits", partition: 0), offset: 0)]))
        committer.begin(at: 0)
        let early = committer.takeEarlyCommit(now: 60_000)
        #expect(!early && !committer.isDue(now: 60_000))
        #expect(coordinator().isDue(now: 60_000))
    }
}
