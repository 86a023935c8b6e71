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
        let scenario = Scenario.draw(&random, spec: family.spec, options: options)
        self.init(
            seed: seed, family: family, scenario: scenario,
            operations: Self.drawOperations(&random, scenario: scenario, steps: random.int(options.size.steps)))
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

    static func drawOperations(_ random: inout SplitMix, scenario: Scenario, steps: Int) -> [Operation] {
        let window = scenario.window
        let idle = window.idleTimeout
        var mode = scenario.mode
        var partitions = scenario.inputPartitions
        let instances = scenario.instances
        let switches = mode == .twoStage && (scenario.has(.topicSwitch) || scenario.has(.oneStageSwitch))
        let switchAt = switches ? random.int(steps / 4...max(steps / 4, 3 * steps / 4)) : -1
        var operations: [Operation] = []

        func budget() -> Int {
            let roll = random.next() % 100
            if roll < 55 { return random.int(1...8) }
            if roll < 90 { return random.int(9...64) }
            return random.int(65...2_000)
        }

        for step in 0..<steps {
            operations.append(.produce(advance: random.int(20...max(40, idle / (scenario.lockstep ? 4 : 3)))))
            let roles: [Role] = mode == .twoStage ? [.normalize, .aggregate] : [.aggregate]
            if scenario.has(.pauses), random.chance(0.04) {
                // Mostly a few idle timeouts; sometimes longer than a window and its retention.
                let long = window.retention + window.size
                operations.append(.pause(random.chance(0.7) ? random.int(idle...3 * idle) : random.int(long...long + 2 * window.size + idle)))
            }
            if scenario.has(.idleSources), random.chance(0.04) {
                operations.append(.silence(partition: Int32(random.int(0...partitions - 1)), for: random.int(idle...4 * idle)))
            }
            if scenario.has(.stalledSources), random.chance(0.04) {
                operations.append(.stall(partition: Int32(random.int(0...partitions - 1)), for: random.int(idle / 2...3 * idle)))
            }
            if scenario.has(.crashes), random.chance(0.05) {
                let role: Role? = mode == .oneStage ? .aggregate : random.pick([Role.normalize, .aggregate, nil])
                operations.append(.crash(role, instance: random.int(0...instances - 1)))
            }
            if mode == .twoStage, scenario.has(.resends), random.chance(0.04) {
                operations.append(.resend(instance: random.int(0...instances - 1), budget: budget(), cut: random.seed()))
            }
            if scenario.has(.crashes) || scenario.has(.resends), random.chance(0.35) {
                operations.append(.adopt(random.pick(roles), pick: random.seed()))
            }
            if scenario.has(.rebalances), random.chance(0.06) {
                operations.append(
                    .rebalance(
                        random.pick(roles), from: random.int(0...instances - 1), to: random.int(0...instances - 1), pick: random.seed()))
            }
            if step == switchAt {
                if scenario.has(.topicSwitch) {
                    partitions = random.int(1...4)
                    operations.append(.switchTopic(partitions: partitions))
                } else {
                    operations.append(.switchToOneStage)
                    mode = .oneStage
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
