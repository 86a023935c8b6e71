import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import Testing
import TrackingDomain
@testable import TrackpipeSimulation

/// The real runners, under the simulated cluster's faults (docs/simulation.md, "The runner
/// simulation").
@Suite("runner simulation: the real StageRunner against a simulated cluster")
struct RunnerSimulationTests {
    @Test("seeds of every family settle with exact counts and every dead letter", arguments: RunnerFamily.allCases)
    func families(_ family: RunnerFamily) {
        for seed in UInt64(1)...3 {
            let outcome = RunnerWorld(seed: seed, family: family).run()
            #expect(
                outcome.passed,
                "seed \(seed) \(family.rawValue): \(outcome.problems.prefix(5)) (\(outcome.rebalances) rebalances, \(outcome.refusedCommits) refused commits)")
        }
    }

    /// With interval commits going on through a rebalance (the fix of the commit storm reverted:
    /// `CommitCoordinator.isDue` without `awaitsNewGeneration`), 6 of 30 seeds of `rebalances`
    /// and 14 of 30 of `mixed` never settle (seed 8: 2,556 rebalances, 2,036 refused commits, no
    /// output); seeds 1 to 3 of `mixed`, which the test above runs, are among them. Kept as
    /// regression seeds.
    @Test("the commit storm's seeds settle", arguments: [UInt64(7), 8])
    func commitStorm(_ seed: UInt64) {
        let outcome = RunnerWorld(seed: seed, family: .rebalances).run()
        #expect(outcome.passed, "\(outcome.problems.prefix(3)) (\(outcome.rebalances) rebalances, \(outcome.refusedCommits) refused commits)")
        #expect(outcome.refusedCommits < 200, "a storm of refused commits: \(outcome.refusedCommits)")
    }

    /// A process's clients hold its life, and its producer holds the runner's delivery
    /// callback, whose `RunnerControl` holds the runner's settings and so the `ProcessClients`:
    /// a life that held its clients strongly closed that loop, and every process of every
    /// schedule outlived it with its cluster (0.8 MB a schedule in `trackpipe-check simulate`).
    @Test("a process's life, its clients, its runner's control and the cluster go with the runner")
    func releasedWithTheRunner() throws {
        weak var cluster: SimulatedCluster?
        weak var life: ProcessLife?
        weak var control: RunnerControl?
        do {
            let kafka = InMemoryKafka()
            kafka.create("hits", partitions: 2)
            kafka.create("repartition", partitions: 1)
            kafka.create("dlq", partitions: 1)
            let simulated = SimulatedCluster(kafka: kafka, now: 0)
            let clients = ProcessClients(cluster: simulated)
            var settings = RunnerSettings(
                topic: "hits", assignment: .group, bound: .unbounded, consumer: KafkaConfig(["group.id": "g"]), producer: KafkaConfig([:]),
                destinations: [.repartition: "repartition", .deadLetter: "dlq"], commitInterval: .max / 4)
            settings.clients = clients
            let identity = GroupIdentity(group: "g", inputTopic: "hits", windowSizes: [60_000], repartitionTopic: "repartition", stateTopic: "state")
            let stage = NormalizeStage(
                sourcePartitions: 2, repartitionPartitions: 1, identity: identity, limits: NormalizerLimits(), maxFutureSkew: 3_600_000,
                idleTimeout: 30_000, originals: OriginalRule(windowSizes: [60_000], retention: 3_600_000, delayAllowance: 30_000))
            let runner = StageRunner(
                stage: stage, settings: settings, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, clock: simulated.clock)
            try runner.begin()
            _ = try runner.turn()
            #expect(clients.consumers.count == 1)
            cluster = simulated
            life = clients.life
            control = runner.control
        }
        #expect(life == nil)
        #expect(control == nil)
        #expect(cluster == nil)
    }
}
