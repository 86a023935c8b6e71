import Kafka
import Pipeline

/// Where a commit can be cut short by a crash: after the state is written (and acknowledged),
/// or after the records held for it went out too, in both cases before the offsets are
/// committed.
public enum CommitPhase: String, Sendable, Hashable, CaseIterable {
    case prepared
    case completed
}

/// What the world needs from a runner, whatever its stage.
protocol DrivenStage: AnyObject {
    var role: Role { get }
    var instance: Int { get }
    var generation: Int { get }
    var topic: String { get }
    var label: String { get }
    var owned: [Int32] { get }
    /// Owned partitions whose state is still being read back.
    var restoring: [Int32] { get }
    var totals: Accounting { get }
    var problems: [String] { get }
    var lastBatch: String { get }
    /// The stage's lowest watermark over its window tasks (nil: none, or no window stage).
    var watermark: Int64? { get }
    func assign(_ partitions: [Int32], kafka: InMemoryKafka, now: Int64)
    @discardableResult
    func process(budget: Int, cut: UInt64, kafka: InMemoryKafka, now: Int64, stamp: WriteStamp) -> Int
    func tick(now: Int64, stamp: WriteStamp)
    func finish(kafka: InMemoryKafka, now: Int64, stamp: WriteStamp)
    func commit(kafka: InMemoryKafka, only: Set<Int32>?, now: Int64, stamp: WriteStamp, stoppingAfter: CommitPhase?)
    func revoke(_ partitions: [Int32], kafka: InMemoryKafka, now: Int64, stamp: WriteStamp)
    func crash() -> [Int32]
    func unread(kafka: InMemoryKafka) -> Int64
    func oldestUnread(kafka: InMemoryKafka) -> Int64?
}

/// Drives one real `Stage` the way `StageRunner` does against Kafka, minus the I/O:
///
/// - on assign it reads the group's committed offset and metadata for each partition, and where
///   there is a commit the partition's log bounds, and hands the stage `PartitionStart`s.
///   Reading resumes at the committed offset, or at the log's start when nothing was committed
///   or the commit lies beyond the log (`auto.offset.reset=earliest`);
/// - partitions whose state the stage must read back (`partitionsAwaitingState`) are held back:
///   each poll also reads a run of their state partitions, from the beginning to the end they
///   had when the restore began, skipping what compaction removed, and hands it to
///   `restoreState`; at the end `stateRestored` lets their records flow;
/// - a poll hands the stage records of flowing partitions in offset order per partition, in
///   runs of partitions as a consumer interleaves them;
/// - a commit is `prepareCommit` (the state written, acknowledged at once here), then
///   `completeCommit` with the state partitions' acknowledged ends (the held records go out),
///   then the stage's `commitPoints()` committed for owned partitions; a crash may cut it short
///   after either of the first two steps;
/// - a revoke is that commit for the revoked partitions, then `stage.revoke`;
/// - a crash drops the stage value, the read positions and the restores: whatever was not
///   committed is gone.
///
/// It also checks what any runner could: each report balances, the stage never reports records
/// of partitions it does not own, a commit point never passes what was read, every call the
/// real runner would stop on (a throw) is reported.
final class SimulatedRunner<S: Stage>: DrivenStage {
    let role: Role
    let instance: Int
    let generation: Int
    let group: String
    let topic: String
    private let destinations: [Destination: TopicLog]
    private let make: () -> S
    private(set) var stage: S
    private(set) var incarnation = 1
    /// Owned partitions and the next offset to read.
    private(set) var positions: [Int32: Int64] = [:]
    /// Partitions whose state is being read back: the next state offset to read, and where the
    /// restore stops (the state partition's end when it began).
    private var restores: [Int32: (next: Int64, end: Int64)] = [:]
    /// This life's producer: per state partition, the offset after its last acknowledged record.
    private var changelogEnds: [Int32: Int64] = [:]
    private(set) var totals = Accounting()
    private(set) var problems: [String] = []
    /// The planted `skipOneRecord` fault: records the consumer never delivers.
    var skip: ((Int32, Int64) -> Bool)?
    /// What the last poll handed the stage, for the trace ("1:0-4 2:7-8", "state 1:0-9").
    private(set) var lastBatch = ""

    init(
        role: Role, instance: Int, generation: Int, group: String, topic: String, destinations: [Destination: TopicLog],
        make: @escaping () -> S
    ) {
        self.role = role
        self.instance = instance
        self.generation = generation
        self.group = group
        self.topic = topic
        self.destinations = destinations
        self.make = make
        self.stage = make()
    }

    var label: String { "\(role.letter)\(instance)#\(incarnation)\(generation > 1 ? "g\(generation)" : "")" }
    var owned: [Int32] { positions.keys.sorted() }
    var restoring: [Int32] { restores.keys.sorted() }
    var watermark: Int64? { stage.gauges().watermark }

    // MARK: Partitions

    func assign(_ partitions: [Int32], kafka: InMemoryKafka, now: Int64) {
        let fresh = partitions.filter { positions[$0] == nil }.sorted()
        guard !fresh.isEmpty else { return }
        let log = kafka.topic(topic)
        let starts = fresh.map { partition -> PartitionStart in
            guard let committed = kafka.committed(group: group, topic: topic, partition: partition) else {
                return PartitionStart(partition: partition)
            }
            // As `RebalanceListener.starts`: the log's bounds are asked where there is a commit.
            return PartitionStart(
                partition: partition, committedOffset: committed.offset, metadata: committed.metadata, logStart: log.start(of: partition),
                logEnd: log.end(of: partition))
        }
        for start in starts {
            let resumes = !start.commitIsBeyondTheLog
            positions[start.partition] = (resumes ? start.committedOffset : nil) ?? log.start(of: start.partition)
        }
        do {
            try stage.assign(starts, now: now)
        } catch {
            problems.append("\(label) assign of \(topic)\(fresh) at \(now) refused: \(error)")
            return
        }
        let awaiting = Set(stage.partitionsAwaitingState).intersection(fresh)
        guard !awaiting.isEmpty else { return }
        guard let state = destinations[.changelog] else {
            problems.append("\(label) has partitions \(awaiting.sorted()) awaiting state, but no state topic")
            return
        }
        for partition in awaiting.sorted() {
            guard Int(partition) < state.partitionCount else {
                problems.append("\(label) awaits the state of partition \(partition), which \(state.name) does not have")
                continue
            }
            let begin = state.start(of: partition), end = state.end(of: partition)
            if end <= begin {
                stateIsIn(partition, now: now)
            } else {
                restores[partition] = (begin, end)
            }
        }
    }

    /// Reads one run of every restoring partition's state (all of it when `all`); partitions
    /// read to their end get their records flowing.
    private func restoreStep(random: inout SplitMix, all: Bool, now: Int64) -> String {
        guard let state = destinations[.changelog], !restores.isEmpty else { return "" }
        var notes: [String] = []
        for partition in restores.keys.sorted() {
            var restore = restores[partition]!
            let whole = random.chance(0.5)
            let run = Int64(1 + random.below(24))
            let upTo = all || whole ? restore.end : min(restore.end, restore.next + run)
            let records = state.stateRecords(partition: partition, offsets: restore.next..<upTo)
            notes.append("state \(partition):\(restore.next)-\(upTo - 1)")
            if !records.isEmpty { stage.restoreState(records, partition: partition) }
            restore.next = upTo
            if restore.next >= restore.end {
                restores[partition] = nil
                stateIsIn(partition, now: now)
            } else {
                restores[partition] = restore
            }
        }
        return notes.joined(separator: " ")
    }

    private func stateIsIn(_ partition: Int32, now: Int64) {
        do {
            try stage.stateRestored(partition: partition, now: now)
        } catch {
            problems.append("\(label) state of \(topic)[\(partition)] refused at \(now): \(error)")
        }
    }

    // MARK: The loop

    @discardableResult
    func process(budget: Int, cut: UInt64, kafka: InMemoryKafka, now: Int64, stamp: WriteStamp) -> Int {
        let log = kafka.topic(topic)
        var random = SplitMix(cut)
        var next = positions
        var available = next.keys.sorted().filter { restores[$0] == nil && next[$0]! < log.end(of: $0) }
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
        lastBatch = slices.map { "\($0.partition):\($0.offsets.lowerBound)-\($0.offsets.upperBound - 1)" }.joined(separator: " ")
        if !slices.isEmpty {
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
        }
        // As the real loop: after the poll, a batch of state for the partitions held back.
        let restored = restoreStep(random: &random, all: budget == .max, now: now)
        if !restored.isEmpty {
            lastBatch += (lastBatch.isEmpty ? "" : " ") + restored
            takeReport()
        }
        return slices.reduce(0) { $0 + $1.offsets.count }
    }

    func tick(now: Int64, stamp: WriteStamp) {
        var sink = SimulatedSink(topics: destinations, stamp: stamp)
        do { try stage.tick(now: now, into: &sink) } catch { problems.append("\(label) tick at \(now): \(error)") }
        takeReport()
    }

    /// The end of a bounded run, as `StageRunner.finishRun`: the stage emits everything, then
    /// the last commit.
    func finish(kafka: InMemoryKafka, now: Int64, stamp: WriteStamp) {
        var sink = SimulatedSink(topics: destinations, stamp: stamp)
        do { try stage.finish(now: now, into: &sink) } catch { problems.append("\(label) finish at \(now): \(error)") }
        takeReport()
        commit(kafka: kafka, only: nil, now: now, stamp: stamp, stoppingAfter: nil)
    }

    // MARK: Commits

    func commit(kafka: InMemoryKafka, only partitions: Set<Int32>?, now: Int64, stamp: WriteStamp, stoppingAfter phase: CommitPhase?) {
        guard !positions.isEmpty else { return }
        var sink = SimulatedSink(topics: destinations, stamp: stamp)
        do {
            try stage.prepareCommit(into: &sink)
            changelogEnds.merge(sink.changelogEnds, uniquingKeysWith: max)
            if phase == .prepared { return }
            try stage.completeCommit(changelogEnds: changelogEnds, now: now, into: &sink)
            takeReport()
            if phase == .completed { return }
        } catch {
            problems.append("\(label) commit at \(now): \(error)")
            return
        }
        let points = stage.commitPoints()
        var committed: [Int32] = []
        defer { stage.committed(committed) }
        for partition in positions.keys.sorted() where partitions?.contains(partition) ?? true {
            guard let point = points[partition] else { continue }
            if point.offset > positions[partition]! {
                problems.append("\(label) commit point \(point.offset) of \(topic)[\(partition)] is past what it read (\(positions[partition]!))")
            }
            if let metadata = point.metadata, metadata.utf8.count > Checkpoint.maxEncodedBytes {
                problems.append("\(label) checkpoint of \(topic)[\(partition)] needs \(metadata.utf8.count) bytes of metadata")
                continue
            }
            kafka.commit(
                group: group, topic: topic, partition: partition, InMemoryKafka.Committed(offset: point.offset, metadata: point.metadata))
            committed.append(partition)
        }
        for partition in points.keys where positions[partition] == nil {
            problems.append("\(label) has a commit point for \(topic)[\(partition)], which it does not own")
        }
    }

    func revoke(_ partitions: [Int32], kafka: InMemoryKafka, now: Int64, stamp: WriteStamp) {
        let mine = partitions.filter { positions[$0] != nil }
        guard !mine.isEmpty else { return }
        commit(kafka: kafka, only: Set(mine), now: now, stamp: stamp, stoppingAfter: nil)
        stage.revoke(mine)
        for partition in mine {
            positions[partition] = nil
            restores[partition] = nil
        }
    }

    func crash() -> [Int32] {
        let lost = owned
        stage = make()
        positions = [:]
        restores = [:]
        changelogEnds = [:]
        incarnation += 1
        return lost
    }

    // MARK: Observation

    /// Records of owned partitions not read yet (held-back partitions' included).
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
