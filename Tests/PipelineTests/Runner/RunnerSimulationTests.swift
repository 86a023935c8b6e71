import Testing
import TrackpipeSimulation

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
}
