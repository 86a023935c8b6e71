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
            #expect(outcome.passed, "seed \(seed) \(family.rawValue): \(outcome.problems.prefix(5)) (\(outcome.rebalances) rebalances, \(outcome.refusedCommits) refused commits)")
        }
    }
}
