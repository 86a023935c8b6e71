import Pipeline
import Windowing

/// The fixed settings of one schedule: topology, window rules and the shape of the input.
/// Windows are short (seconds) so that emission, correction, eviction and idleness all happen
/// within a few hundred hits.
public struct Scenario: Sendable, CustomStringConvertible {
    public var mode: Mode
    public var features: Set<Feature>
    public var lockstep: Bool
    public var inputPartitions: Int
    public var repartitionPartitions: Int
    public var instances: Int
    public var window: WindowConfig
    public var maxFutureSkew: Int64
    public var markInterval: Int64
    public var shards: Int
    public var batchBytes: Int
    /// Messages a second.
    public var rate: Int
    public var deliveries: Int
    public var badRate: Double
    public var duplicateRate: Double
    public var trackingOffEvery: Int
    public var lateShare: Double
    public var beyondShare: Double
    public var fastClockShare: Double
    public var wrongClockShare: Double
    /// The input is partitioned by delivery (one stage, or a switch to it).
    public var keyedByDelivery: Bool
    /// The run ends with `finish` (a bounded run); otherwise with a tick far enough ahead that
    /// every window is emitted.
    public var drainByFinish: Bool
    /// Simulated wall-clock ms at the start.
    public var start: Int64
    public var hitSeed: UInt64
    /// The normalize stage's allowance for records overtaken on their way (`OriginalRule`):
    /// mostly 0, the tightest one sound in a world where records reach the topic as they are
    /// written and every instance reads the same clock, so that the originals rule is checked
    /// at its edge; sometimes the worker's default.
    public var delayAllowance: Int64 = 0
    /// With `purges`: the aggregate stage's `--purge-interval` (ms), and how long the cluster
    /// takes to carry a purge out.
    public var purgeInterval: Int64 = 0
    public var purgeDelay: Int64 = 0
    /// The settings of the repartition and state topics before the first start (nil: none, as
    /// trackpipe creates them).
    public var internalTopics: InternalTopicSettings? = nil

    public func has(_ feature: Feature) -> Bool { features.contains(feature) }

    /// Draws a scenario for a family.
    static func draw(_ random: inout SplitMix, spec: FamilySpec, options: SimulationOptions) -> Scenario {
        let features = spec.features.union(options.enable).subtracting(options.disable)
        let size = random.pick([1_000, 2_000, 3_000, 5_000] as [Int64])
        let grace = random.pick([0, size / 2, size])
        // A long retention outlasts the schedule (steps of at most half an idle timeout, hits
        // arriving up to about two minutes after their time).
        let retention = spec.longRetention ? grace + 1_000 * size : grace + size * random.int(1...4)
        let idle = random.pick([max(500, size / 2), size, 2 * size])
        // Every value is drawn whether its feature is on or not, so that switching a feature off
        // leaves the rest of the schedule as it was (which is what narrows a failure down).
        let capped = random.chance(0.5), cap = random.int(8...60)
        let maxEntries = features.contains(.entryCap) && capped ? cap : 10_000_000
        let window = WindowConfig(size: size, grace: grace, retention: retention, idleTimeout: idle, maxEntries: maxEntries)
        let mode = spec.mode
        let inputPartitions = random.int(1...4)
        let drawnRate = random.int(options.size.rate)
        let twoLanes = random.chance(0.3)
        let smallRecords = random.chance(0.5), recordBytes = random.int(200...1_500)
        let trackingOffEvery = random.int(3...5)
        let shares = (late: random.int(3...15), beyond: random.int(1...5), fast: random.int(1...5), wrong: random.int(1...3))
        var scenario = Scenario(
            mode: mode, features: features, lockstep: spec.lockstep,
            inputPartitions: inputPartitions, repartitionPartitions: random.int(1...4), instances: random.int(1...3),
            window: window,
            maxFutureSkew: random.pick([size, 2 * size, retention + size]),
            // As `Pipeline` sets it from the idle timeout.
            markInterval: min(500, max(50, idle / 4)),
            shards: features.contains(.lanes) && twoLanes ? 2 : 1,
            batchBytes: features.contains(.smallRecords) && smallRecords ? recordBytes : 256 * 1024,
            // In lockstep every partition must keep receiving hits, or it would go idle.
            rate: spec.lockstep ? max(drawnRate, 12 * inputPartitions) : spec.busyWindows ? 3 * drawnRate : drawnRate,
            deliveries: spec.busyWindows ? min(2, random.int(2...10)) : random.int(2...10),
            badRate: features.contains(.badMessages) ? 0.03 : 0,
            duplicateRate: features.contains(.retries) ? 0.05 : 0,
            trackingOffEvery: features.contains(.trackingOff) ? trackingOffEvery : 1_000_000,
            lateShare: features.contains(.lateHits) ? Double(shares.late) / 100 : 0,
            beyondShare: features.contains(.beyondRetention) ? Double(shares.beyond) / 100 : 0,
            fastClockShare: features.contains(.fastClocks) ? Double(shares.fast) / 100 : 0,
            wrongClockShare: features.contains(.wrongClocks) ? Double(shares.wrong) / 100 : 0,
            keyedByDelivery: mode == .oneStage || features.contains(.oneStageSwitch) || features.contains(.twoStageSwitch),
            drainByFinish: random.chance(0.5) || spec.endsWithFinish,
            start: 1_795_341_600_000 + random.int(0...86_400_000),
            hitSeed: random.next())
        // Drawn last, so that the rest of a seed's schedule stays what it was before.
        scenario.delayAllowance = random.chance(0.75) ? 0 : OriginalRule.defaultAllowance(window)
        // Drawn from a generator of their own, so that the schedules drawn before purges
        // existed stay as they were.
        var purging = SplitMix(scenario.hitSeed ^ 0x9_06E_DE1E)
        let interval = purging.pick([1, 250, 1_000, 5_000] as [Int64]), delay = purging.pick([0, 0, 100, 1_500, 8_000] as [Int64])
        if features.contains(.purges) {
            scenario.purgeInterval = interval
            scenario.purgeDelay = delay
        }
        // Several sizes in a third of the schedules (`--window 1m,1h,1d` in seconds), each a
        // multiple of the smaller ones: a window of a larger size ends no sooner, so a hit too late
        // for the largest is too late for every size (and dead-lettered). Drawn apart, so that the
        // schedules of one size stay as they were; not in lockstep, whose lateness checks judge
        // one size.
        var sizing = SplitMix(scenario.hitSeed ^ 0x0051_2E5E_5012_E5E5)
        let several = sizing.chance(0.35), factors = sizing.pick([[2], [3], [2, 6], [3, 12]] as [[Int64]])
        if several, !spec.lockstep {
            // A window k times as long holds about k times the entries: the cap grows with the
            // sizes' lengths, so that it still evicts some windows early rather than every one.
            let lengths = [1] + factors
            scenario.window = WindowConfig(
                sizes: lengths.map { WindowSize(size: size * $0, grace: grace) }, retention: retention, idleTimeout: idle,
                maxEntries: maxEntries < 1_000_000 ? maxEntries * Int(lengths.reduce(0, +)) : maxEntries)
        }
        return scenario
    }

    var hitSettings: HitSource.Settings {
        HitSource.Settings(
            seed: hitSeed, start: start, rate: Double(rate), deliveries: deliveries, badRate: badRate, duplicateRate: duplicateRate,
            trackingOffEvery: trackingOffEvery, lateShare: lateShare, beyondShare: beyondShare, fastClockShare: fastClockShare,
            wrongClockShare: wrongClockShare, window: (window.lengths[0], window.sizes[0].grace, window.retention), maxFutureSkew: maxFutureSkew)
    }

    public var description: String {
        var parts = [
            mode.rawValue, "\(inputPartitions) input partitions",
            mode == .twoStage ? "\(repartitionPartitions) repartition partitions" : nil,
            "\(instances) instances",
            "window \(window.lengths.map(String.init).joined(separator: ",")) grace \(window.sizes[0].grace) retention \(window.retention) idle \(window.idleTimeout)",
            window.maxEntries < 1_000_000 ? "cap \(window.maxEntries)" : nil,
            "skew \(maxFutureSkew)", "marks every \(markInterval)",
            delayAllowance > 0 ? "originals allowance \(delayAllowance)" : nil,
            shards > 1 ? "\(shards) lanes" : nil,
            batchBytes < 256 * 1024 ? "records of \(batchBytes) B" : nil,
            "\(rate)/s over \(deliveries) deliveries",
            keyedByDelivery ? "keyed by delivery" : nil,
            drainByFinish ? "ends with finish" : "ends with a far tick",
            lockstep ? "lockstep" : nil,
            purgeInterval > 0 ? "purges every \(purgeInterval) ms, carried out after \(purgeDelay) ms" : nil,
            internalTopics.map { "topics: \($0)" },
        ].compactMap { $0 }
        parts.append("features: " + features.sorted().map(\.rawValue).joined(separator: ","))
        return parts.joined(separator: "; ")
    }
}
