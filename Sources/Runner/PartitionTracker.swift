import Kafka

/// The partitions assigned to a runner and where each stands: its phase (`PartitionPhase`),
/// which records of a batch the stage may see (the admission guard), where a bounded run stops,
/// how far behind each partition is. Only owned partitions (taken over from a known start)
/// count for commits, bounds, progress and lag; a `starting` one is only waited for.
///
/// The guard exists because librdkafka 2.0.x has handed out records of revoked partitions and
/// repeated or skipped offsets around rebalances: a record of a partition not owned, or at an
/// offset already read, is dropped; a jump forward is taken and reported. A record of a
/// partition held back for its state that slips through is dropped too, without moving it on
/// (the partition is sought back to its start once the state is in).
struct PartitionTracker {
    let topic: String
    private var assigned: [TopicPartition: TrackedPartition] = [:]
    /// The output is behind: every running partition's input is paused until it catches up.
    var backpressured = false
    /// Partitions read to their end (a bounded run's) and then given away: done, though no
    /// longer owned.
    private var finished: Set<Int32> = []

    struct TrackedPartition {
        var phase: PartitionPhase
        var offsets = PartitionOffsets()
        /// Where reading started, once known (for progress).
        var first: Int64?
        /// Where a bounded run stops (exclusive); nil while unbounded or not yet known.
        var end: Int64?
        /// Read up to `end`.
        var atEnd = false
        /// Where the consumer said the partition ended before `end` was known (the lookup of
        /// the bound failed and is asked again): librdkafka says it once, so the bound learned
        /// later is judged against it.
        var endSeen: Int64?
        /// A group without a commit begins where the partition began at assignment, and nothing
        /// of it has been delivered yet: a first jump is from the group's start.
        var atGroupStart = false

        /// A jump from the next offset to read to `to`, named for where that offset came from.
        func jump(_ partition: TopicPartition, from: Int64, to: Int64) -> InputSpan {
            InputSpan(partition: partition, from: from, to: to, cause: atGroupStart ? .groupStart : .jump)
        }
    }

    /// What the guard made of one batch (the records themselves go to the caller's buffer).
    struct Admitted {
        /// Records dropped: of partitions not owned, at offsets already read, or gathered before
        /// their partition was revoked.
        var stale = 0
        /// Jumps forward, and the ends of bounded runs reached past offsets never delivered.
        var gaps: [InputSpan] = []
        /// Errors the consumer delivered among the records (`admit`'s; `sift` sees none).
        var errors: [KafkaError] = []
    }

    /// What `admit` sorts a batch through, kept from batch to batch: a batch of a few thousand
    /// records needs buffers of a hundred kilobytes or more, which glibc would map and unmap
    /// afresh (and the kernel zero) for every batch.
    private var sightings: [(index: Int, sighting: Sighting)] = []
    private var taken: [Int] = []

    init(topic: String) {
        self.topic = topic
    }

    /// The owned partitions and where each stands.
    private var owned: LazyFilterSequence<[TopicPartition: TrackedPartition]> { assigned.lazy.filter { $0.value.phase.isOwned } }

    /// Owns no partition (one still starting does not count).
    var isEmpty: Bool { !assigned.values.contains { $0.phase.isOwned } }
    var partitions: [TopicPartition] { owned.map(\.key) }
    var sortedPartitions: [TopicPartition] { owned.map(\.key).sorted { $0.partition < $1.partition } }

    subscript(partition: TopicPartition) -> TrackedPartition? { assigned[partition].flatMap { $0.phase.isOwned ? $0 : nil } }

    // MARK: Phases

    private mutating func apply(_ event: PartitionPhase.Event, to partition: TopicPartition) {
        guard let phase = assigned[partition]?.phase else { return }
        assigned[partition]?.phase = PartitionPhase.transition(phase, on: event)
    }

    /// Moves each of these partitions on by `event` (the stage asked for their state, their
    /// restore began).
    mutating func apply(_ event: PartitionPhase.Event, to partitions: [Int32]) {
        for partition in partitions { apply(event, to: TopicPartition(topic: topic, partition: partition)) }
    }

    /// Partitions whose start the cluster did not say: they wait, `starting`. Returns those
    /// that were not waiting already.
    mutating func awaitStart(_ partitions: [TopicPartition]) -> [TopicPartition] {
        partitions.filter { tp in
            guard assigned[tp] == nil else { return false }
            assigned[tp] = TrackedPartition(phase: .starting)
            return true
        }
    }

    /// Takes a partition that reading resumes at `committed` (nil: where the consumer's reset
    /// policy puts it), or at `readingFrom` when that is later (the log start has passed the
    /// commit, or the group committed nothing and begins where the partition began: `InputLoss.start`).
    mutating func take(_ partition: TopicPartition, committed: Int64?, metadata: String?, readingFrom: Int64? = nil) {
        let phase = PartitionPhase.transition(assigned[partition]?.phase ?? .starting, on: .taken)
        var offsets = PartitionOffsets(nextToRead: committed, committed: committed, metadata: metadata)
        if let readingFrom { offsets.nextToRead = max(offsets.nextToRead ?? readingFrom, readingFrom) }
        var tracked = TrackedPartition(phase: phase, offsets: offsets)
        tracked.atGroupStart = committed == nil && readingFrom != nil
        assigned[partition] = tracked
    }

    /// Partitions given away: owned or still starting, they are forgotten (those read to their
    /// end are remembered as done).
    mutating func release(_ partitions: [TopicPartition]) {
        for partition in partitions {
            if let state = self[partition], state.atEnd { finished.insert(partition.partition) }
            assigned[partition] = nil
        }
    }

    /// Of a topic of `count` partitions, those this runner neither owns nor has read to their
    /// end: another member of the group holds them.
    func heldByOthers(of count: Int) -> [Int32] {
        (0..<Int32(count)).filter { assigned[TopicPartition(topic: topic, partition: $0)]?.phase.isOwned != true && !finished.contains($0) }
    }

    /// Every owned partition read to its end, or none owned: nothing left to read here.
    var ownedAtEnd: Bool { owned.allSatisfy { $0.value.atEnd && !$0.value.phase.awaitsState } }

    /// A partition's state is in: where its input starts again (nil: where the reset policy
    /// puts it, the beginning), and whether the consumer must be sought back there (a record
    /// slipped through while it was held back). Most partitions are paused before their first
    /// fetch and need no seek: a seek waits on librdkafka's broker thread, which a busy client
    /// can keep longer than the seek's timeout.
    mutating func letThrough(_ partition: Int32) -> (start: Int64?, seek: Bool) {
        let tp = TopicPartition(topic: topic, partition: partition)
        let seek = assigned[tp]?.phase.slipped ?? false
        apply(.stateIn, to: tp)
        return (assigned[tp]?.offsets.nextToRead, seek)
    }

    /// Partitions waiting for the cluster to say where they start, in partition order.
    var starting: [TopicPartition] { inPhase { $0 == .starting }.map { TopicPartition(topic: topic, partition: $0) } }

    /// Owned partitions whose end is not known (a bounded run's end lookup the cluster did not
    /// answer), in partition order.
    var withoutEnd: [TopicPartition] {
        owned.filter { $0.value.end == nil }.map(\.key).sorted { $0.partition < $1.partition }
    }

    /// Owned partitions whose restore the cluster did not let begin, in partition order.
    var awaitingRestore: [Int32] { inPhase { if case .awaitingRestore = $0 { true } else { false } } }

    private func inPhase(_ isIn: (PartitionPhase) -> Bool) -> [Int32] {
        assigned.filter { isIn($0.value.phase) }.map(\.key.partition).sorted()
    }

    /// Assigned partitions held back while the runner asks the cluster again at each turn (where
    /// they start, or whether their restore may begin), apart from `excluded` (being revoked).
    func waitingOnCluster(apartFrom excluded: [TopicPartition] = []) -> Int {
        assigned.reduce(0) { $0 + ($1.value.phase.waitsOnCluster && !excluded.contains($1.key) ? 1 : 0) }
    }

    /// Whether the input of a partition flows: it is running and the output is not behind.
    func flows(_ partition: TopicPartition) -> Bool { assigned[partition]?.phase == .running && !backpressured }

    /// Owned partitions whose records go to the stage (not held back), paused or not.
    var running: [TopicPartition] { assigned.filter { $0.value.phase == .running }.map(\.key) }

    mutating func noteCommitted(_ partition: TopicPartition, _ point: CommitPoint) {
        guard self[partition] != nil else { return }
        assigned[partition]?.offsets.committed = point.offset
        assigned[partition]?.offsets.metadata = point.metadata
    }

    /// What this runner committed, per owned partition, in partition order.
    var committed: [TopicPartitionOffset] {
        sortedPartitions.compactMap { tp in
            assigned[tp]?.offsets.committed.map { TopicPartitionOffset(tp, offset: $0, metadata: assigned[tp]?.offsets.metadata) }
        }
    }

    // MARK: Admission

    /// One event of a batch, as the guard sees it.
    enum Sighting {
        case record(partition: Int32, offset: Int64)
        /// The partition had nothing more than `offset`.
        case partitionEnd(partition: Int32, offset: Int64)
        case other
    }

    /// Sorts a batch into the records the stage may see, in order, in `records` (emptied
    /// first, its capacity kept), and says what was dropped.
    ///
    /// Every record goes to `records` as it is read, and the few the guard drops are taken out
    /// after: held aside first (an optional per event) and copied over, each record was
    /// written and read twice more (callgrind: 436 instructions a record for the whole of
    /// `admit`, before).
    mutating func admit(_ batch: some PolledBatch, into records: inout [PolledRecord]) -> Admitted {
        var errors: [KafkaError] = []
        var sightings = self.sightings
        self.sightings = []
        sightings.removeAll(keepingCapacity: true)
        records.removeAll(keepingCapacity: true)
        for index in 0..<batch.count {
            switch batch.event(at: index) {
            case .record(let record):
                sightings.append((index, .record(partition: record.partition, offset: record.offset)))
                records.append(record)
            case .partitionEOF(let tp, let offset):
                sightings.append((index, tp.topic == topic ? .partitionEnd(partition: tp.partition, offset: offset) : .other))
            case .error(let error): errors.append(error)
            }
        }
        var taken = self.taken
        self.taken = []
        taken.removeAll(keepingCapacity: true)
        var admitted = sift(sightings, revocations: batch.revocations, taken: &taken)
        admitted.errors = errors
        if taken.count < records.count { Self.keep(taken, of: sightings, in: &records) }
        self.sightings = sightings
        self.taken = taken
        return admitted
    }

    /// Keeps of `records`, the batch's records in the order of their sightings, those whose
    /// index `sift` took (ascending, a subsequence of the records' indices).
    private static func keep(_ taken: [Int], of sightings: [(index: Int, sighting: Sighting)], in records: inout [PolledRecord]) {
        var next = 0
        var position = 0
        var kept = 0
        for (index, sighting) in sightings {
            guard case .record = sighting else { continue }
            if next < taken.count, taken[next] == index {
                records[kept] = records[position]
                kept += 1
                next += 1
            }
            position += 1
        }
        records.removeLast(records.count - kept)
    }

    /// The guard itself, on what it needs of each event: the partition and offset of records,
    /// the ends of partitions, and which partitions were revoked after how many events (those
    /// gathered before belong to an assignment that no longer holds, even if the partition was
    /// assigned again since). The records it takes are appended to `taken`, by index.
    mutating func sift(
        _ sightings: [(index: Int, sighting: Sighting)], revocations: [ConsumerBatch.Revocation], taken: inout [Int]
    ) -> Admitted {
        var sifted = Admitted()
        let (allRevokedBefore, revokedBefore) = revokedBefore(revocations)
        // Records come in runs of one partition: its state is taken out once per run.
        var current: TopicPartition?
        var state = TrackedPartition(phase: .running)
        var isOwned = false
        func putBack() {
            if let current, isOwned { assigned[current] = state }
        }
        for (index, sighting) in sightings {
            switch sighting {
            case .record(let partition, let offset):
                if current?.partition != partition {
                    putBack()
                    current = TopicPartition(topic: topic, partition: partition)
                    let known = current.flatMap { self[$0] }
                    isOwned = known != nil
                    if let known { state = known }
                }
                guard isOwned, index >= max(allRevokedBefore, revokedBefore[partition] ?? 0), state.phase == .running else {
                    if isOwned { state.phase = PartitionPhase.transition(state.phase, on: .recordDropped) }
                    sifted.stale += 1
                    continue
                }
                if let end = state.end, offset >= end {
                    Self.reachEnd(&state, end: end, partition: current!, gaps: &sifted.gaps)
                    continue
                }
                switch state.offsets.admit(offset: offset) {
                case .stale:
                    sifted.stale += 1
                    continue
                case .gap(let skipped):
                    sifted.gaps.append(state.jump(current!, from: offset - skipped, to: offset))
                case .take:
                    break
                }
                state.atGroupStart = false
                if let end = state.end, offset + 1 >= end { state.atEnd = true }
                state.endSeen = nil
                taken.append(index)
            case .partitionEnd(let partition, let offset):
                putBack()
                current = nil
                // An end of the assignment a revocation in this batch ended says nothing of this one.
                guard index >= max(allRevokedBefore, revokedBefore[partition] ?? 0) else { continue }
                partitionEnded(TopicPartition(topic: topic, partition: partition), at: offset, gaps: &sifted.gaps)
            case .other:
                continue
            }
        }
        putBack()
        return sifted
    }

    /// After how many events of a batch every partition, and each partition, was revoked:
    /// what was gathered before belongs to an assignment that no longer holds.
    private func revokedBefore(_ revocations: [ConsumerBatch.Revocation]) -> (all: Int, by: [Int32: Int]) {
        var all = 0
        var by: [Int32: Int] = [:]
        for revocation in revocations {
            guard let partitions = revocation.partitions else {
                all = max(all, revocation.before)
                continue
            }
            for tp in partitions where tp.topic == topic { by[tp.partition] = max(by[tp.partition] ?? 0, revocation.before) }
        }
        return (all, by)
    }

    /// The consumer says a running partition has nothing past `offset`: at or past a bounded
    /// run's end, the end is reached; before the end is known, it is remembered (`endSeen`).
    private mutating func partitionEnded(_ tp: TopicPartition, at offset: Int64, gaps: inout [InputSpan]) {
        guard var ended = self[tp], ended.phase == .running else { return }
        guard let end = ended.end else {
            ended.endSeen = offset
            assigned[tp] = ended
            return
        }
        guard offset >= end else { return }
        Self.reachEnd(&ended, end: end, partition: tp, gaps: &gaps)
        assigned[tp] = ended
    }

    /// A bounded run's partition reached its end: offsets before it never delivered are judged
    /// like a jump (a trailing transaction marker, or records deleted before they were read).
    private static func reachEnd(_ state: inout TrackedPartition, end: Int64, partition: TopicPartition, gaps: inout [InputSpan]) {
        if let next = state.offsets.nextToRead, next < end {
            gaps.append(
                InputSpan(partition: partition, from: next, to: end, cause: state.atGroupStart ? .groupStart : .endReached))
            state.offsets.nextToRead = end
        }
        state.atGroupStart = false
        state.atEnd = true
    }

    // MARK: Bounds

    /// Notes where each partition ends now; a partition already there is at its end. Returns
    /// the jumps to the end of partitions the consumer had already said were read to it.
    mutating func takeEnds(of partitions: [TopicPartition], from consumer: any ConsumerClient) throws -> [InputSpan] {
        guard !partitions.isEmpty else { return [] }
        let ends = try consumer.endOffsets(partitions)
        let unknown = partitions.filter { self[$0]?.offsets.nextToRead == nil }
        let beginnings = unknown.isEmpty ? [] : try consumer.beginningOffsets(unknown)
        return noteEnds(ends, beginnings: beginnings)
    }

    /// Notes where partitions end, as the cluster said, and where those whose start is not known
    /// begin; a partition already there is at its end, and so is one whose end the consumer
    /// reported before this bound was known (its jump to the end returned, as `sift` returns it).
    @discardableResult
    mutating func noteEnds(_ ends: [TopicPartitionOffset], beginnings: [TopicPartitionOffset]) -> [InputSpan] {
        var gaps: [InputSpan] = []
        for end in ends {
            guard var state = self[end.topicPartition] else { continue }
            state.end = end.offset
            let start =
                state.offsets.nextToRead ?? beginnings.first { $0.topicPartition == end.topicPartition }?.offset ?? 0
            state.first = state.first ?? start
            if start >= end.offset { state.atEnd = true }
            if let seen = state.endSeen, seen >= end.offset, !state.atEnd {
                Self.reachEnd(&state, end: end.offset, partition: end.topicPartition, gaps: &gaps)
            }
            state.endSeen = nil
            assigned[end.topicPartition] = state
        }
        return gaps
    }

    /// Every owned partition read to its end (a bounded run is done); a partition still being
    /// restored is not.
    var allAtEnd: Bool { !isEmpty && ownedAtEnd }

    /// Offsets read and to read over every partition's bounded range; nil until all are known.
    var boundedProgress: (done: Int64, total: Int64)? {
        guard !isEmpty else { return nil }
        var done: Int64 = 0
        var total: Int64 = 0
        for (_, state) in owned {
            guard let end = state.end, let first = state.first else { return nil }
            total += max(0, end - first)
            done += max(0, min(state.offsets.nextToRead ?? first, end) - first)
        }
        return (done, total)
    }

    /// Messages behind the end of each owned partition, from the watermarks the consumer last
    /// saw (no request is made).
    func lags(from consumer: any ConsumerClient) -> [Int32: Int64] {
        var lags: [Int32: Int64] = [:]
        for (tp, state) in owned {
            guard let marks = consumer.cachedWatermarks(tp) else { continue }
            lags[tp.partition] = max(0, marks.high - (state.offsets.nextToRead ?? marks.low))
        }
        return lags
    }
}
