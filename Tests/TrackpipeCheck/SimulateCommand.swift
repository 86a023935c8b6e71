import ArgumentParser
import Foundation
import TrackpipeSimulation

/// The deterministic simulator (docs/simulation.md) run for as long as asked: random schedules
/// of crashes, rebalances, late hits and switches against the real stages and an in-memory
/// Kafka, every schedule checked against the reference model. Prints schedules a second and
/// every failing seed; a failing seed replays alone with `--seed S --schedules 1`.
struct SimulateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Random schedules against the real stages and an in-memory Kafka; prints every failing seed.")

    @Option(help: "Schedules to run.") var schedules = 1_000
    @Option(help: "Seed of the first schedule (decimal or 0x-hex); schedule i uses seed + i.") var seed = "1"
    @Option(
        name: .customLong("family"),
        help: "A family to run (repeatable; default: every family). One of: \(ScheduleFamily.allCases.map(\.rawValue).joined(separator: ", ")).")
    var families: [String] = []
    @Flag(help: "What is expected to pass today: known-failing families narrowed (without the features, or the check, that make them fail).")
    var passing = false
    @Option(help: "Add a feature to every family (repeatable): \(Feature.allCases.map(\.rawValue).joined(separator: ", ")).")
    var enable: [String] = []
    @Option(help: "Take a feature from every family (repeatable), to narrow a failure down.") var disable: [String] = []
    @Flag(
        inversion: .prefixedNo,
        help: "Fail on a revision that steps back even after a crash (the default); --no-strict-revisions counts those apart.")
    var strictRevisions = true
    @Flag(inversion: .prefixedNo, help: "Check the strict lateness rule (default: as the family says).") var strictLateness: Bool?
    @Flag(help: "Apply the strict lateness rule to every hit, even where sources went idle (a rule the design does not keep).")
    var strictLatenessThroughIdleness = false
    @Flag(inversion: .prefixedNo, help: "Check the bound on lateness through quiet periods (lockstep families; default: as the family says).")
    var quietBound: Bool?
    @Option(
        help: "After a refused mode switch, always apply this remedy (\(SwitchRemedy.allCases.map(\.rawValue).joined(separator: ", "))) instead of the drawn one.")
    var remedy: String?
    @Flag(help: "Small schedules, as the test suite runs them.") var quick = false
    @Flag(help: "Print what every operation did (for replaying one seed).") var trace = false
    @Flag(help: "Shrink the first failure of each kind to fewer operations and print it.") var shrink = false
    @Option(help: "Plant a defect in the simulation to see the checks catch it: \(Fault.allCases.map(\.rawValue).joined(separator: ", ")).")
    var fault: String?
    @Option(help: "Print the full report of at most this many failures (every failing seed is listed regardless).")
    var reports = 3

    func run() throws {
        guard let base = Simulator.parseSeed(seed) else { throw ValidationError("--seed \(seed) is not a number") }
        let chosen: [ScheduleFamily] = try named(families, "family", default: ScheduleFamily.allCases)
        var options = SimulationOptions()
        options.size = quick ? .quick : .standard
        options.enable = try features(enable)
        options.disable = try features(disable)
        options.strictRevisions = strictRevisions
        options.strictLateness = strictLateness
        options.strictLatenessThroughIdleness = strictLatenessThroughIdleness
        options.quietBound = quietBound
        options.trace = trace
        if let remedy {
            guard let chosen = SwitchRemedy(rawValue: remedy) else { throw ValidationError("no remedy \(remedy)") }
            options.remedy = chosen
        }
        if let fault {
            guard let planted = Fault(rawValue: fault) else { throw ValidationError("no fault \(fault)") }
            options.fault = planted
        }

        print("simulate: \(schedules) schedules of \(chosen.map(\.rawValue).joined(separator: ", ")) from seed \(seed)")
        var campaign = Campaign(families: chosen, options: options, narrowKnownFailures: passing)
        let started = monotonicSeconds()
        var lastProgress = started
        var printed = 0
        for index in 0..<schedules {
            let outcome = campaign.run(index: index, base: base)
            if !outcome.passed {
                print("FAILED \(outcome.schedule.family.rawValue) seed \(hex(outcome.schedule.seed)): \(outcome.signature ?? "")")
                if printed < reports || trace {
                    print(outcome.report())
                    printed += 1
                }
            } else if trace {
                print(outcome.report())
            }
            let now = monotonicSeconds()
            if now - lastProgress >= 10 {
                lastProgress = now
                print(String(format: "  %d schedules, %d failed, %.1f schedules/s", index + 1, campaign.failed, Double(index + 1) / (now - started)))
            }
        }
        let elapsed = monotonicSeconds() - started
        print(campaign.summary)
        print(
            String(
                format: "%d schedules in %.1f s: %.1f schedules/s; %d failed", campaign.schedules, elapsed,
                Double(campaign.schedules) / max(elapsed, 1e-9), campaign.failed))
        if shrink {
            for failure in campaign.firstFailures {
                print("shrinking \(failure.schedule.family.rawValue) seed \(hex(failure.schedule.seed)) (\(failure.signature ?? ""))…")
                let small = Simulator.shrink(failure)
                var traced = small.options
                traced.trace = true
                print(trace ? Simulator.run(small.schedule, options: traced).report() : small.report())
            }
        }
        if campaign.failed > 0 { throw ExitCode(1) }
    }

    private func features(_ names: [String]) throws -> Set<Feature> {
        Set(try named(names.flatMap { $0.split(separator: ",").map(String.init) }, "feature", default: []))
    }

    private func hex(_ seed: UInt64) -> String { "0x" + String(seed, radix: 16) }
}
