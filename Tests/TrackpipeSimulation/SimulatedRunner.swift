import Kafka
import Pipeline

/// What the world needs from a runner, whatever its stage.
protocol DrivenStage: AnyObject {
    var role: Role { get }
    var instance: Int { get }
    var topic: String { get }
    var label: String { get }
    var owned: [Int32] { get }
    var totals: Accounting { get }
    var problems: [String] { get }
    var lastBatch: String { get }
    func assign(_ partitions: [Int32], kafka: InMemoryKafka, now: Int64)
    @discardableResult
    func process(budget: Int, cut: UInt64, kafka: InMemoryKafka, now: Int64, stamp: WriteStamp) -> Int
    func tick(now: Int64, stamp: WriteStamp)
    func finish(now: Int64, stamp: WriteStamp)
    func commit(kafka: InMemoryKafka, only: Set<Int32>?)
    func revoke(_ partitions: [Int32], kafka: InMemoryKafka)
    func crash() -> [Int32]
    func unread(kafka: InMemoryKafka) -> Int64
    func oldestUnread(kafka: InMemoryKafka) -> Int64?
}

/// Drives one real `Stage` the way `StageRunner` does against Kafka, minus the I/O:
///
/// - on assign it reads the group's committed offset and metadata for each partition, hands the
///   stage `PartitionStart`s and resumes reading at the committed offset (the earliest offset
///   when nothing was committed, as `auto.offset.reset=earliest`);
/// - a poll hands the stage records of owned partitions in offset order per partition, in runs
///   of partitions as a consumer interleaves them;
/// - a commit writes the stage's `commitPoints()` for owned partitions (every send is already
///   acknowledged in the simulation, so a commit may come after any call);
/// - a revoke commits the revoked partitions, then calls `stage.revoke`;
/// - a crash drops the stage value and the read positions: whatever was not committed is gone.
///
/// It also checks what any runner could: each report must balance, and the stage must never
/// report records of partitions it does not own (the simulation never hands it any).
final class SimulatedRunner<S: Stage>: DrivenStage {
    let role: Role
    let instance: Int
    let group: String
    let topic: String
    private let destinations: [Destination: TopicLog]
    private let make: () -> S
    private(set) var stage: S
    private(set) var incarnation = 1
    /// Owned partitions and the next offset to read.
    private(set) var positions: [Int32: Int64] = [:]
    private(set) var totals = Accounting()
    private(set) var problems: [String] = []
    /// The planted `skipOneRecord` fault: records the consumer never delivers.
    var skip: ((Int32, Int64) -> Bool)?
    /// What the last poll handed the stage, for the trace ("1:0-4 2:7-8").
    private(set) var lastBatch = ""

    init(role: Role, instance: Int, group: String, topic: String, destinations: [Destination: TopicLog], make: @escaping () -> S) {
        self.role = role
        self.instance = instance
        self.group = group
        self.topic = topic
        self.destinations = destinations
        self.make = make
        self.stage = make()
    }

    var label: String { "\(role.letter)\(instance)#\(incarnation)" }
    var owned: [Int32] { positions.keys.sorted() }

    func assign(_ partitions: [Int32], kafka: InMemoryKafka, now: Int64) {
        let fresh = partitions.filter { positions[$0] == nil }.sorted()
        guard !fresh.isEmpty else { return }
        let starts = fresh.map { partition -> PartitionStart in
            let committed = kafka.committed(group: group, topic: topic, partition: partition)
            return PartitionStart(partition: partition, committedOffset: committed?.offset, metadata: committed?.metadata)
        }
        for start in starts { positions[start.partition] = start.committedOffset ?? 0 }
        stage.assign(starts, now: now)
    }

    @discardableResult
    func process(budget: Int, cut: UInt64, kafka: InMemoryKafka, now: Int64, stamp: WriteStamp) -> Int {
        let log = kafka.topic(topic)
        var random = SplitMix(cut)
        var next = positions
        var available = next.keys.sorted().filter { next[$0]! < log.end(of: $0) }
        var slices: [(partition: Int32, offsets: Range<Int64>)] = []
        var left = max(0, budget)
        while left > 0, !available.isEmpty {
            let index = Int(random.below(UInt64(available.count)))
            let partition = available[index]
            let from = next[partition]!
            let room = log.end(of: partition) - from
            // Runs of random length: a consumer hands out what each fetch brought.
            let run = min(room, Int64(min(left, 1 + Int(random.below(UInt64(min(left, 64)))))))
            slices.append((partition, from..<from + run))
            next[partition] = from + run
            left -= Int(run)
            if from + run == log.end(of: partition) { available.remove(at: index) }
        }
        guard !slices.isEmpty else { return 0 }
        lastBatch = slices.map { "\($0.partition):\($0.offsets.lowerBound)-\($0.offsets.upperBound - 1)" }.joined(separator: " ")
        var sink = SimulatedSink(topics: destinations, stamp: stamp)
        do {
            try log.withInputRecords(slices) { records in
                let delivered = skip.map { skip in records.filter { !skip($0.partition, $0.offset) } } ?? records
                try stage.process(delivered, now: now, into: &sink)
            }
        } catch {
            problems.append("\(label) process at \(now): \(error)")
        }
        positions = next
        takeReport()
        return slices.reduce(0) { $0 + $1.offsets.count }
    }

    func tick(now: Int64, stamp: WriteStamp) {
        var sink = SimulatedSink(topics: destinations, stamp: stamp)
        do { try stage.tick(now: now, into: &sink) } catch { problems.append("\(label) tick at \(now): \(error)") }
        takeReport()
    }

    func finish(now: Int64, stamp: WriteStamp) {
        var sink = SimulatedSink(topics: destinations, stamp: stamp)
        do { try stage.finish(now: now, into: &sink) } catch { problems.append("\(label) finish at \(now): \(error)") }
        takeReport()
    }

    func commit(kafka: InMemoryKafka, only partitions: Set<Int32>? = nil) {
        let points = stage.commitPoints()
        for partition in positions.keys.sorted() where partitions?.contains(partition) ?? true {
            guard let point = points[partition] else { continue }
            if point.offset > positions[partition]! {
                problems.append("\(label) commit point \(point.offset) of \(topic)[\(partition)] is past what it read (\(positions[partition]!))")
            }
            kafka.commit(
                group: group, topic: topic, partition: partition, InMemoryKafka.Committed(offset: point.offset, metadata: point.metadata))
        }
        for partition in points.keys where positions[partition] == nil {
            problems.append("\(label) has a commit point for \(topic)[\(partition)], which it does not own")
        }
    }

    func revoke(_ partitions: [Int32], kafka: InMemoryKafka) {
        let mine = partitions.filter { positions[$0] != nil }
        guard !mine.isEmpty else { return }
        commit(kafka: kafka, only: Set(mine))
        stage.revoke(mine)
        for partition in mine { positions[partition] = nil }
    }

    func crash() -> [Int32] {
        let lost = owned
        stage = make()
        positions = [:]
        incarnation += 1
        return lost
    }

    func unread(kafka: InMemoryKafka) -> Int64 {
        let log = kafka.topic(topic)
        return positions.reduce(0) { $0 + log.end(of: $1.key) - $1.value }
    }

    /// When the oldest record waiting to be read was written; nil when nothing waits.
    func oldestUnread(kafka: InMemoryKafka) -> Int64? {
        let log = kafka.topic(topic)
        return positions.compactMap { partition, position in
            position < log.end(of: partition) ? log.entry(partition: partition, offset: position).stamp.time : nil
        }.min()
    }

    private func takeReport() {
        let report = stage.drainReport()
        let accounting = report.accounting
        if !accounting.balanced {
            problems.append(
                "\(label): unbalanced report: consumed \(accounting.consumed) != accepted \(accounting.accepted) + filtered \(accounting.filteredTotal) + dead-lettered \(accounting.deadLetteredTotal) + duplicates \(accounting.duplicates)"
            )
        }
        if accounting.staleDropped > 0 {
            problems.append("\(label): dropped \(accounting.staleDropped) records as not owned, though it owns them")
        }
        totals.add(accounting)
    }
}
