/// One schedule: its scenario and its operations, all drawn from one seed. The same seed,
/// family and options always give the same schedule.
public struct Schedule: Sendable {
    public var seed: UInt64
    public var family: ScheduleFamily
    public var scenario: Scenario
    public var operations: [Operation]

    public init(seed: UInt64, family: ScheduleFamily, scenario: Scenario, operations: [Operation]) {
        self.seed = seed
        self.family = family
        self.scenario = scenario
        self.operations = operations
    }

    /// Draws the schedule of `seed` in `family`.
    public init(seed: UInt64, family: ScheduleFamily, options: SimulationOptions) {
        var random = SplitMix(seed)
        // Draws added after the others were settled come from a stream of their own, so that
        // every earlier seed still draws the schedule it drew (regression seeds stay what they were).
        var later = SplitMix(seed ^ 0x57A7_E5EE_D000_0001)
        var scenario = Scenario.draw(&random, spec: family.spec, options: options)
        if family.spec.topicSettings {
            var settings = SplitMix(seed ^ 0x0070_1C5E_7715_0001)
            scenario.internalTopics = settings.pick(InternalTopicSettings.cases)
        }
        self.init(
            seed: seed, family: family, scenario: scenario,
            operations: Self.drawOperations(&random, later: &later, scenario: scenario, steps: random.int(options.size.steps)))
    }

    /// The operations as one line each step (a step starts where the clock moves).
    public var compactOperations: String {
        var lines: [String] = []
        var line: [String] = []
        for operation in operations {
            if case .produce = operation, !line.isEmpty {
                lines.append(line.joined(separator: " "))
                line = []
            }
            line.append(operation.description)
        }
        if !line.isEmpty { lines.append(line.joined(separator: " ")) }
        return lines.enumerated().map { "  \($0.offset): \($0.element)" }.joined(separator: "\n")
    }

    static func drawOperations(_ random: inout SplitMix, later: inout SplitMix, scenario: Scenario, steps: Int) -> [Operation] {
        let window = scenario.window
        let idle = window.idleTimeout
        var mode = scenario.mode
        var partitions = scenario.inputPartitions
        let instances = scenario.instances
        let switches =
            mode == .twoStage ? scenario.has(.topicSwitch) || scenario.has(.oneStageSwitch) : scenario.has(.twoStageSwitch)
        let drawnSwitch = random.int(steps / 4...max(steps / 4, 3 * steps / 4))
        let drawnRemedy = random.pick(SwitchRemedy.allCases)
        let remedy = scenario.has(.offsetReset) ? drawnRemedy : .newGroup
        let switchAt = switches ? drawnSwitch : -1
        var operations: [Operation] = []
        // Drawn apart, so that the schedules of families without retention stay as they were.
        var retention = SplitMix(scenario.hitSeed ^ 0x0DE1_E7E5)
        // Drawn apart from the rest (see `Scenario.draw`): families without refused purges keep
        // the schedules they had.
        var refusing = SplitMix(scenario.hitSeed ^ 0x0_DE1E_7E5)

        func budget() -> Int {
            let roll = random.next() % 100
            let small = random.int(1...8), medium = random.int(9...64), large = random.int(65...2_000)
            return roll < 55 ? small : roll < 90 ? medium : large
        }

        for step in 0..<steps {
            operations.append(.produce(advance: random.int(20...max(40, idle / (scenario.lockstep ? 4 : 3)))))
            let roles: [Role] = mode == .twoStage ? [.normalize, .aggregate] : [.aggregate]
            // Every event's values are drawn whether its feature is on or not (see `Scenario.draw`).
            let long = window.retention + window.lengths[0]
            let pause = (random.chance(0.04), random.chance(0.7), random.int(idle...3 * idle), random.int(long...long + 2 * window.lengths[0] + idle))
            // In lockstep the pause ends the step, once everything produced has been read.
            let pauseOperation: Operation? = scenario.has(.pauses) && pause.0 ? .pause(pause.1 ? pause.2 : pause.3) : nil
            if let pauseOperation, !scenario.lockstep { operations.append(pauseOperation) }
            let silence = (random.chance(0.04), Int32(random.int(0...partitions - 1)), random.int(idle...4 * idle))
            if scenario.has(.idleSources), silence.0 { operations.append(.silence(partition: silence.1, for: silence.2)) }
            let stall = (random.chance(0.04), Int32(random.int(0...partitions - 1)), random.int(idle / 2...3 * idle))
            if scenario.has(.stalledSources), stall.0 { operations.append(.stall(partition: stall.1, for: stall.2)) }
            let crash = (
                random.chance(0.05), random.pick([Role.normalize, .aggregate, nil]), random.int(0...instances - 1),
                random.pick([CommitPhase.prepared, .completed, nil, nil])
            )
            if scenario.has(.crashes), crash.0 {
                let phase = scenario.has(.commitCrashes) ? crash.3 : nil
                operations.append(.crash(mode == .oneStage ? .aggregate : crash.1, instance: crash.2, during: phase))
            }
            // Commits often, so that a window's changes pile up in segments and get merged, and
            // cuts of its writes fall in merges too.
            // The partitions of a stage killed so are handed on soon, so that the next kill finds
            // state to write.
            let cut = (
                later.chance(0.2), later.int(0...instances - 1), later.int(0...99), later.chance(0.4), later.int(0...instances - 1),
                later.chance(0.6), later.seed()
            )
            if scenario.has(.stateWriteCrashes) {
                if cut.3 { operations.append(.commit(.aggregate, instance: cut.4)) }
                if cut.0 { operations.append(.crash(.aggregate, instance: cut.1, during: .writingState(percent: cut.2))) }
                if cut.5 { operations.append(.adopt(.aggregate, pick: cut.6)) }
            }
            let resend = (random.chance(0.04), random.int(0...instances - 1), budget(), random.seed())
            if mode == .twoStage, scenario.has(.resends), resend.0 {
                operations.append(.resend(instance: resend.1, budget: resend.2, cut: resend.3))
            }
            let adopt = (random.chance(0.35), random.pick(roles), random.seed())
            if scenario.has(.crashes) || scenario.has(.resends) || scenario.has(.stateWriteCrashes), adopt.0 {
                operations.append(.adopt(adopt.1, pick: adopt.2))
            }
            let move = (random.chance(0.06), random.pick(roles), random.int(0...instances - 1), random.int(0...instances - 1), random.seed())
            if scenario.has(.rebalances), move.0 { operations.append(.rebalance(move.1, from: move.2, to: move.3, pick: move.4)) }
            let compact = (random.chance(0.15), random.seed())
            if scenario.has(.compaction), compact.0 { operations.append(.compact(pick: compact.1)) }
            // Early on too, before a window task has read its partition (or committed on it).
            if scenario.has(.retention), retention.chance(step < 4 ? 0.4 : 0.06) { operations.append(.retain(pick: retention.seed())) }
            let refusal = (refusing.chance(0.06), refusing.pick(PurgeRefusal.allCases), refusing.int(idle...8 * idle))
            if scenario.has(.purges), scenario.has(.refusedPurges), refusal.0 { operations.append(.refusePurges(refusal.1, for: refusal.2)) }
            let newPartitions = random.int(1...4)
            if step == switchAt {
                if scenario.has(.topicSwitch), mode == .twoStage {
                    partitions = newPartitions
                    operations.append(.switchTopic(partitions: partitions))
                } else {
                    mode = mode == .twoStage ? .oneStage : .twoStage
                    operations.append(.switchMode(to: mode, remedy: remedy))
                }
            }
            let active: [Role] = mode == .twoStage ? [.normalize, .aggregate] : [.aggregate]
            if scenario.lockstep {
                for role in active {
                    for instance in 0..<instances {
                        operations.append(.process(role, instance: instance, budget: random.int(1...40), cut: random.seed()))
                        operations.append(.process(role, instance: instance, budget: .max, cut: random.seed()))
                        operations.append(.tick(role, instance: instance))
                        if random.chance(0.2) { operations.append(.commit(role, instance: instance)) }
                    }
                }
                if let pauseOperation { operations.append(pauseOperation) }
            } else {
                var turn: [Operation] = []
                for role in active {
                    for instance in 0..<instances {
                        if random.chance(0.7) { turn.append(.process(role, instance: instance, budget: budget(), cut: random.seed())) }
                        if random.chance(0.6) { turn.append(.tick(role, instance: instance)) }
                        if random.chance(0.2) { turn.append(.commit(role, instance: instance)) }
                    }
                }
                // Stages run on their own threads: any interleaving of their calls is possible.
                for index in turn.indices.reversed() where index > 0 {
                    turn.swapAt(index, Int(random.below(UInt64(index + 1))))
                }
                operations += turn
            }
        }
        return operations
    }
}
