import Foundation

/// Many schedules over several families, with the failures grouped the way a person reads
/// them: per family, per signature, the seeds.
public struct Campaign: Sendable {
    public struct FamilyTally: Sendable {
        public var schedules = 0
        public var failed = 0
        public var hits = 0
        public var steppedBackAfterCrash = 0
        public var strictLatenessChecked = 0
        public var quietBoundChecked = 0
        /// Partitions purged, and purges refused by the cluster.
        public var purged = 0
        public var purgesRefused = 0
        /// Bytes written to the repartition topics, and what they keep at the end.
        public var repartitionBytesWritten = 0
        public var repartitionBytesKept = 0
        /// Schedules of several sizes, their smaller sizes' windows checked exact, hits too late
        /// for a smaller size alone, and windows with too many choices to try.
        public var severalSizes = 0
        public var smallerSizeKeys = 0
        public var lateInSmallerSizes = 0
        public var unexploredKeys = 0
        /// Wall-clock seconds spent on the family's schedules.
        public var seconds = 0.0
        /// Failing seeds per signature, in the order found.
        public var failures: [String: [UInt64]] = [:]
        /// Per signature, the failing seed with the fewest messages (then operations): the one to
        /// replay first.
        public var smallest: [String: (seed: UInt64, messages: Int, operations: Int)] = [:]
    }

    public let families: [ScheduleFamily]
    public let options: SimulationOptions
    /// Run each known-failing family narrowed to what passes today (`KnownFailure.narrowed`).
    public let narrowKnownFailures: Bool
    public private(set) var tallies: [ScheduleFamily: FamilyTally] = [:]
    /// The first failing outcome of each (family, signature), for the full report.
    public private(set) var firstFailures: [ScheduleOutcome] = []
    public private(set) var schedules = 0

    public init(families: [ScheduleFamily], options: SimulationOptions, narrowKnownFailures: Bool = false) {
        precondition(!families.isEmpty, "a campaign runs at least one family")
        self.families = families
        self.options = options
        self.narrowKnownFailures = narrowKnownFailures
    }

    /// The options schedules of `family` run with.
    public func options(for family: ScheduleFamily) -> SimulationOptions {
        guard narrowKnownFailures, let known = ScheduleFamily.knownFailing[family] else { return options }
        return known.narrowed(options)
    }

    /// Runs schedule `index`: family `index % families.count`, seed `base + index`, so that a
    /// failing seed replays alone with `--seed` and `--schedules 1`.
    @discardableResult
    public mutating func run(index: Int, base: UInt64) -> ScheduleOutcome {
        let family = families[index % families.count]
        let started = ContinuousClock.now
        let outcome = Simulator.run(seed: base &+ UInt64(index), family: family, options: options(for: family))
        let elapsed = started.duration(to: .now).components
        tallies[family, default: FamilyTally()].seconds += Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18
        record(outcome)
        return outcome
    }

    public mutating func record(_ outcome: ScheduleOutcome) {
        schedules += 1
        let family = outcome.schedule.family
        var tally = tallies[family] ?? FamilyTally()
        tally.schedules += 1
        tally.hits += outcome.stats.countedHits
        tally.steppedBackAfterCrash += outcome.stats.steppedBackAfterCrash
        tally.strictLatenessChecked += outcome.stats.strictLatenessChecked ?? 0
        tally.quietBoundChecked += outcome.stats.quietBoundChecked ?? 0
        tally.purged += outcome.stats.purged
        tally.purgesRefused += outcome.stats.purgesRefused
        tally.repartitionBytesWritten += outcome.stats.repartitionBytesWritten
        tally.repartitionBytesKept += outcome.stats.repartitionBytesKept
        if outcome.stats.sizes > 1 { tally.severalSizes += 1 }
        tally.smallerSizeKeys += outcome.stats.smallerSizeKeys
        tally.lateInSmallerSizes += outcome.stats.lateInSmallerSizes
        tally.unexploredKeys += outcome.stats.unexploredKeys
        if let signature = outcome.signature {
            tally.failed += 1
            if tally.failures[signature] == nil { firstFailures.append(outcome) }
            tally.failures[signature, default: []].append(outcome.schedule.seed)
            let size = (outcome.stats.messages, outcome.schedule.operations.count)
            if tally.smallest[signature].map({ ($0.messages, $0.operations) > size }) ?? true {
                tally.smallest[signature] = (outcome.schedule.seed, size.0, size.1)
            }
        }
        tallies[family] = tally
    }

    public var failed: Int { tallies.values.reduce(0) { $0 + $1.failed } }

    /// One block per family: schedules, failures by signature with their first seeds.
    public var summary: String {
        var lines: [String] = []
        for family in families {
            guard let tally = tallies[family] else { continue }
            var line =
                "\(family.rawValue): \(tally.schedules) schedules, \(tally.failed) failed, \(tally.hits) hits, \(String(format: "%.1f", Double(tally.schedules) / max(tally.seconds, 1e-9))) schedules/s"
            if tally.steppedBackAfterCrash > 0 { line += ", \(tally.steppedBackAfterCrash) revisions stepped back after a crash" }
            if tally.strictLatenessChecked > 0 { line += ", strict lateness checked on \(tally.strictLatenessChecked) hits" }
            if tally.quietBoundChecked > 0 { line += ", the quiet bound checked on \(tally.quietBoundChecked) hits" }
            if tally.severalSizes > 0 {
                line +=
                    ", \(tally.severalSizes) of several sizes (\(tally.smallerSizeKeys) windows of a smaller size exact, \(tally.lateInSmallerSizes) hits too late for a smaller size alone, \(tally.unexploredKeys) windows unexplored)"
            }
            if tally.purged + tally.purgesRefused > 0 { line += ", \(tally.purged) partitions purged (\(tally.purgesRefused) refused)" }
            if tally.repartitionBytesWritten > 0 {
                line += String(
                    format: ", repartition topics keep %d of %d bytes written (%.1f %%)", tally.repartitionBytesKept, tally.repartitionBytesWritten,
                    100 * Double(tally.repartitionBytesKept) / Double(tally.repartitionBytesWritten))
            }
            if let known = ScheduleFamily.knownFailing[family] {
                if narrowKnownFailures {
                    let without = known.without.map(\.rawValue).sorted() + (known.withoutStrictLateness ? ["strict lateness"] : [])
                    line += " (known failing; run without \(without.joined(separator: ", ")))"
                } else {
                    line += " (known failing)"
                }
            }
            lines.append(line)
            for (signature, seeds) in tally.failures.sorted(by: { $0.value.count > $1.value.count }) {
                let shown = seeds.prefix(8).map(Simulator.hex).joined(separator: " ")
                lines.append("    \(signature): \(seeds.count) × seeds \(shown)\(seeds.count > 8 ? " …" : "")")
                if let smallest = tally.smallest[signature] {
                    lines.append(
                        "      smallest: seed \(Simulator.hex(smallest.seed)) (\(smallest.messages) messages, \(smallest.operations) operations)")
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}
