import ArgumentParser
import Foundation
import TrackpipeSimulation

/// The runner simulation (docs/simulation.md, "The runner simulation") for as many seeds as
/// asked: whole instances, with their real runners, against a simulated cluster that rebalances,
/// refuses commits, cuts polls, goes unreachable and refuses records. Prints every failing seed
/// with its first problems; one replays alone with `--seed S --seeds 1`.
struct SimulateRunnerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate-runner",
        abstract: "Seeds of the runner simulation: real runners against a simulated cluster's faults; prints every failing seed.")

    @Option(help: "Seeds to run per family.") var seeds = 30
    @Option(help: "The first seed; the others follow it.") var seed: UInt64 = 1
    @Option(
        name: .customLong("family"),
        help: "A family to run (repeatable; default: every family). One of: \(RunnerFamily.allCases.map(\.rawValue).joined(separator: ", ")).")
    var families: [String] = []
    @Flag(help: "Print the cluster's trace of each failing seed.") var trace = false

    func run() throws {
        let chosen: [RunnerFamily] = try named(families, "family", default: RunnerFamily.allCases)
        let started = Date()
        var failed = 0
        for family in chosen {
            let familyStarted = Date()
            var failing: [UInt64] = []
            var rebalances = 0
            var refusals = 0
            var exits = 0
            var purged = 0, purgesRefused = 0, written = 0, kept = 0, severalSizes = 0
            for seed in seed..<(seed + UInt64(seeds)) {
                let outcome = RunnerWorld(seed: seed, family: family, tracing: trace).run()
                rebalances += outcome.rebalances
                refusals += outcome.refusedCommits
                exits += outcome.exits
                purged += outcome.purged
                purgesRefused += outcome.purgesRefused
                written += outcome.repartitionBytesWritten
                kept += outcome.repartitionBytesKept
                if outcome.sizes > 1 { severalSizes += 1 }
                guard !outcome.passed else { continue }
                failing.append(seed)
                print("FAILED \(family.rawValue) seed \(seed): \(outcome.problems.prefix(3).joined(separator: "; "))")
                print("  \(outcome.rebalances) rebalances, \(outcome.refusedCommits) refused commits; replay: trackpipe-check simulate-runner --family \(family.rawValue) --seed \(seed) --seeds 1")
                if trace { print(outcome.trace.joined(separator: "\n")) }
            }
            failed += failing.count
            let seconds = Date().timeIntervalSince(familyStarted)
            print(
                "\(family.rawValue): \(seeds) seeds, \(failing.count) failed\(failing.isEmpty ? "" : " (\(failing.map(String.init).joined(separator: ", ")))"), \(severalSizes) of windows of 1m and 2m, \(rebalances) rebalances, \(refusals) refused commits, \(exits) exits on a refused topic, \(purged) partitions purged (\(purgesRefused) refused), the repartition topic keeps \(kept) of \(written) bytes written, \(String(format: "%.1f", seconds)) s"
            )
        }
        print("\(seeds * chosen.count) schedules in \(String(format: "%.1f", Date().timeIntervalSince(started))) s; \(failed) failed")
        if failed > 0 { throw ExitCode(1) }
    }
}
