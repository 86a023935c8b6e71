import HitGenerator

/// What one schedule came to.
public struct ScheduleOutcome: Sendable {
    public let schedule: Schedule
    public let options: SimulationOptions
    public let discrepancies: [Discrepancy]
    public let stats: ScheduleStats
    /// What every operation did, when tracing.
    public let trace: [String]?

    public var passed: Bool { discrepancies.isEmpty }

    /// The finer kind of the first discrepancy: schedules failing the same way share it.
    public var signature: String? { discrepancies.first?.signature }

    /// The command that replays this schedule.
    public var replayCommand: String {
        var parts = ["trackpipe-check simulate --family \(schedule.family.rawValue) --seed \(Simulator.hex(schedule.seed)) --schedules 1"]
        if options.size == .quick { parts.append("--quick") }
        for feature in options.enable.sorted() { parts.append("--enable \(feature.rawValue)") }
        for feature in options.disable.sorted() { parts.append("--disable \(feature.rawValue)") }
        if !options.strictRevisions { parts.append("--no-strict-revisions") }
        if let remedy = options.remedy { parts.append("--remedy \(remedy.rawValue)") }
        if let strict = options.strictLateness { parts.append(strict ? "--strict-lateness" : "--no-strict-lateness") }
        if options.strictLatenessThroughIdleness { parts.append("--strict-lateness-through-idleness") }
        if let quiet = options.quietBound { parts.append(quiet ? "--quiet-bound" : "--no-quiet-bound") }
        if let fault = options.fault { parts.append("--fault \(fault.rawValue)") }
        return parts.joined(separator: " ")
    }

    /// Seed, scenario, operations and the first discrepancies: enough to see what happened and
    /// to replay it.
    public func report(discrepancyLimit: Int = 6) -> String {
        var lines = [
            "\(passed ? "passed" : "FAILED"): family \(schedule.family.rawValue), seed \(Simulator.hex(schedule.seed))",
            "replay: \(replayCommand)",
            "scenario: \(schedule.scenario)",
            "stats: \(stats.description)",
        ]
        if !passed {
            lines.append("operations (one line per clock step):")
            lines.append(schedule.compactOperations)
            lines.append("discrepancies (\(min(discrepancyLimit, discrepancies.count)) of \(discrepancies.count)):")
            lines += discrepancies.prefix(discrepancyLimit).map { "  - \($0)" }
        }
        if let trace {
            lines.append("trace (simulated ms since the start):")
            lines += trace
        }
        return lines.joined(separator: "\n")
    }
}

/// Runs schedules: real `NormalizeStage` and `AggregateStage` values driven by simulated
/// runners against an in-memory Kafka, then judged by `ScheduleChecker`. No thread, clock or
/// socket is involved, so a seed always replays the same way.
public enum Simulator {
    /// Runs the schedule of `seed` in `family`.
    public static func run(seed: UInt64, family: ScheduleFamily, options: SimulationOptions = SimulationOptions()) -> ScheduleOutcome {
        run(Schedule(seed: seed, family: family, options: options), options: options)
    }

    /// Runs the schedule of `seed` again, recording what every operation did.
    public static func replay(seed: UInt64, family: ScheduleFamily, options: SimulationOptions = SimulationOptions()) -> ScheduleOutcome {
        var traced = options
        traced.trace = true
        return run(seed: seed, family: family, options: traced)
    }

    /// Runs a given schedule (a drawn one, or one being shrunk).
    public static func run(_ schedule: Schedule, options: SimulationOptions) -> ScheduleOutcome {
        let world = World(scenario: schedule.scenario, options: options)
        for operation in schedule.operations { world.apply(operation) }
        world.drain()
        let checker = ScheduleChecker(
            world: world, strictRevisions: options.strictRevisions,
            strictLateness: options.strictLatenessThroughIdleness || (options.strictLateness ?? schedule.family.spec.strictLateness),
            throughIdleness: options.strictLatenessThroughIdleness,
            quietBound: options.quietBound ?? schedule.family.spec.quietBound)
        let (discrepancies, stats) = checker.check()
        return ScheduleOutcome(schedule: schedule, options: options, discrepancies: discrepancies, stats: stats, trace: world.trace)
    }

    /// The seed of the `index`-th schedule of a run started from `base`.
    public static func seed(base: UInt64, index: Int) -> UInt64 {
        var mixer = SplitMix64(seed: base ^ (UInt64(index) &* 0x9E37_79B9_7F4A_7C15))
        return mixer.next()
    }

    /// A smaller schedule failing the same way (same signature): operations are dropped, in
    /// chunks and then one by one, and the hit rate lowered, while the failure stays. Stops after
    /// `attempts` runs.
    public static func shrink(_ outcome: ScheduleOutcome, attempts: Int = 2_000) -> ScheduleOutcome {
        guard let signature = outcome.signature else { return outcome }
        var best = outcome
        var runs = 0
        func tryCandidate(_ candidate: Schedule) -> Bool {
            guard runs < attempts else { return false }
            runs += 1
            var quiet = outcome.options
            quiet.trace = false
            let result = run(candidate, options: quiet)
            guard result.discrepancies.contains(where: { $0.signature == signature }) else { return false }
            best = result
            return true
        }
        // A lower rate first: fewer hits make every later run cheaper.
        while best.schedule.scenario.rate > 1 {
            var candidate = best.schedule
            candidate.scenario.rate = max(1, candidate.scenario.rate / 2)
            if !tryCandidate(candidate) { break }
        }
        var chunk = max(1, best.schedule.operations.count / 2)
        while chunk >= 1, runs < attempts {
            var index = 0
            var removed = false
            while index < best.schedule.operations.count, runs < attempts {
                var candidate = best.schedule
                candidate.operations.removeSubrange(index..<min(index + chunk, candidate.operations.count))
                if tryCandidate(candidate) { removed = true } else { index += chunk }
            }
            if !removed { chunk /= 2 }
        }
        for deliveries in stride(from: 1, to: best.schedule.scenario.deliveries, by: 1) where runs < attempts {
            var candidate = best.schedule
            candidate.scenario.deliveries = deliveries
            if tryCandidate(candidate) { break }
        }
        // Put the failing signature first in the report.
        var discrepancies = best.discrepancies
        if let first = discrepancies.firstIndex(where: { $0.signature == signature }) { discrepancies.swapAt(0, first) }
        return ScheduleOutcome(schedule: best.schedule, options: best.options, discrepancies: discrepancies, stats: best.stats, trace: nil)
    }

    static func hex(_ seed: UInt64) -> String { "0x" + String(seed, radix: 16) }

    /// Reads a seed written in decimal or as 0x-hex.
    public static func parseSeed(_ text: String) -> UInt64? {
        if text.hasPrefix("0x") || text.hasPrefix("0X") { return UInt64(text.dropFirst(2), radix: 16) }
        return UInt64(text)
    }
}
