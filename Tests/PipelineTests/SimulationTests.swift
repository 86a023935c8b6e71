import Testing
import TrackpipeSimulation

/// The deterministic simulator, a short run: a fixed set of seeds per family, each schedule
/// checked for accounting, the last record per key against the reference, and revisions
/// (docs/simulation.md). Families that fail on the current stages are listed in
/// `ScheduleFamily.knownFailing` and checked to still fail, so the list stays honest.
@Suite("Deterministic simulation")
struct SimulationTests {
    static let firstSeed: UInt64 = 0x5EED_0018
    static let schedulesPerFamily = 60

    static var quick: SimulationOptions {
        var options = SimulationOptions()
        options.size = .quick
        return options
    }

    @Test("every family expected to pass holds every check on each of its schedules", arguments: ScheduleFamily.passing)
    func familyPasses(_ family: ScheduleFamily) {
        var failures: [ScheduleOutcome] = []
        var hits = 0
        for index in 0..<Self.schedulesPerFamily {
            let outcome = Simulator.run(seed: Self.firstSeed &+ UInt64(index), family: family, options: Self.quick)
            hits += outcome.stats.countedHits
            if !outcome.passed { failures.append(outcome) }
        }
        #expect(hits > Self.schedulesPerFamily * 20, "the schedules of \(family.rawValue) counted only \(hits) hits")
        #expect(
            failures.isEmpty,
            "\(failures.count) of \(Self.schedulesPerFamily) schedules of \(family.rawValue) failed; seeds \(failures.map { "0x" + String($0.schedule.seed, radix: 16) }); the first:\n\(failures.first?.report() ?? "")"
        )
    }

    @Test("a family listed as known failing still fails; once its stage bug is fixed, remove it from ScheduleFamily.knownFailing",
        arguments: ScheduleFamily.knownFailing.keys.sorted { $0.rawValue < $1.rawValue })
    func knownFailingStillFails(_ family: ScheduleFamily) {
        var options = Self.quick
        options.size = .standard
        let failing = (0..<60).lazy.map { Simulator.run(seed: Self.firstSeed &+ UInt64($0), family: family, options: options) }
            .first { !$0.passed }
        #expect(failing != nil, "\(family.rawValue) passed 60 schedules: if its bug is fixed, move it out of ScheduleFamily.knownFailing")
    }

    @Test("a seed replays exactly: the same operations give the same output, dead letters and verdict")
    func replaysExactly() {
        for family in [ScheduleFamily.chaos, .chaosOneStage] {
            let first = Simulator.replay(seed: Self.firstSeed, family: family, options: Self.quick)
            let second = Simulator.replay(seed: Self.firstSeed, family: family, options: Self.quick)
            #expect(first.schedule.operations == second.schedule.operations)
            #expect(first.trace != nil && first.trace == second.trace, "the traces of two replays of \(family.rawValue) differ")
            #expect(first.discrepancies.map(\.description) == second.discrepancies.map(\.description))
            #expect(first.stats.outputRecords > 0)
        }
    }

    @Test("the checks catch a defect planted in the simulated runner or cluster", arguments: Fault.allCases)
    func plantedDefectsAreCaught(_ fault: Fault) {
        var options = Self.quick
        options.fault = fault
        // Committing the read position loses hits only when a partition changes owner.
        let family: ScheduleFamily = fault == .commitReadPosition ? .recoveryOneStage : .steady
        let outcomes = (0..<30).map { Simulator.run(seed: Self.firstSeed &+ UInt64($0), family: family, options: options) }
        let caught = outcomes.filter { !$0.passed }
        // Seeds are fixed, so the count is too; a planted defect shows only in schedules where it
        // matters (committing the read position, only where a partition changes owner while
        // windows are open).
        #expect(caught.count >= 3, "\(fault.rawValue) was caught in only \(caught.count) of 30 schedules of \(family.rawValue)")
        let kinds = Set(caught.flatMap { $0.discrepancies.map(\.kind) })
        switch fault {
        case .commitReadPosition, .skipOneRecord:
            #expect(!kinds.isDisjoint(with: [.lastRecord, .missingKey, .missingDeadLetter, .accounting]), "\(kinds)")
        case .reemitStaleRecord:
            #expect(kinds.isSuperset(of: [.lastRecord, .revisionWentBack]), "\(kinds)")
        }
    }
}
