import Kafka

/// The partitions a runner owns and where each stands: which records of a batch the stage may
/// see (the admission guard), where a bounded run stops, how far behind each partition is.
///
/// The guard exists because librdkafka 2.0.x has handed out records of revoked partitions and
/// repeated or skipped offsets around rebalances: a record of a partition not owned, or at an
/// offset already read, is dropped; a jump forward is taken and reported.
struct PartitionTracker {
    let topic: String
    private(set) var owned: [TopicPartition: TrackedPartition] = [:]
    /// Partitions whose state is being read back: their input is held back (paused), and a
    /// record of theirs that slips through is dropped without moving them on (the partition is
    /// sought back to its start once the state is in).
    private(set) var restoring: Set<Int32> = []
    /// Held-back partitions that had a record dropped: the consumer's position has moved past
    /// their start, so they need a seek back before they flow.
    private var slipped: Set<Int32> = []

    struct TrackedPartition {
        var offsets = PartitionOffsets()
        /// Where reading started, once known (for progress).
        var first: Int64?
        /// Where a bounded run stops (exclusive); nil while unbounded or not yet known.
        var end: Int64?
        /// Read up to `end`.
        var atEnd = false
    }

    /// What the guard made of one batch (the records themselves go to the caller's buffer).
    struct Admitted {
        /// Records dropped: of partitions not owned, or at offsets already read.
        var stale = 0
        /// Jumps forward: (partition, expected offset, offset delivered).
        var gaps: [(TopicPartition, Int64, Int64)] = []
        /// Errors the consumer delivered among the records.
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

    var isEmpty: Bool { owned.isEmpty }
    var partitions: [TopicPartition] { Array(owned.keys) }
    var sortedPartitions: [TopicPartition] { owned.keys.sorted { $0.partition < $1.partition } }

    subscript(partition: TopicPartition) -> TrackedPartition? { owned[partition] }

    // MARK: Ownership

    /// Takes a partition that reading resumes at `committed` (nil: where the consumer's reset
    /// policy puts it).
    mutating func take(_ partition: TopicPartition, committed: Int64?, metadata: String?) {
        owned[partition] = TrackedPartition(offsets: PartitionOffsets(nextToRead: committed, committed: committed, metadata: metadata))
    }

    mutating func release(_ partitions: [TopicPartition]) {
        for partition in partitions {
            owned[partition] = nil
            restoring.remove(partition.partition)
            slipped.remove(partition.partition)
        }
    }

    mutating func holdBack(_ partitions: [Int32]) { restoring.formUnion(partitions) }

    /// A partition's state is in: where its input starts again (nil: where the reset policy
    /// puts it, the beginning), and whether the consumer must be sought back there (a record
    /// slipped through while it was held back). Most partitions are paused before their first
    /// fetch and need no seek: a seek waits on librdkafka's broker thread, which a busy client
    /// can keep longer than the seek's timeout.
    mutating func letThrough(_ partition: Int32) -> (start: Int64?, seek: Bool) {
        restoring.remove(partition)
        let seek = slipped.remove(partition) != nil
        return (owned[TopicPartition(topic: topic, partition: partition)]?.offsets.nextToRead, seek)
    }

    /// Owned partitions whose input flows (not held back for a restore).
    var flowing: [TopicPartition] { owned.keys.filter { !restoring.contains($0.partition) } }

    mutating func noteCommitted(_ partition: TopicPartition, _ point: CommitPoint) {
        owned[partition]?.offsets.committed = point.offset
        owned[partition]?.offsets.metadata = point.metadata
    }

    /// What this runner committed, per owned partition, in partition order.
    var committed: [TopicPartitionOffset] {
        sortedPartitions.compactMap { tp in
            owned[tp]?.offsets.committed.map { TopicPartitionOffset(tp, offset: $0, metadata: owned[tp]?.offsets.metadata) }
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

    /// What the guard decided about a batch, beside the records it took (which `sift` appends
    /// to a buffer of the caller's).
    struct Sifted {
        /// Records dropped: of partitions not owned, at offsets already read, or gathered before
        /// their partition was revoked.
        var stale = 0
        /// Jumps forward: (partition, expected offset, offset delivered).
        var gaps: [(TopicPartition, Int64, Int64)] = []
    }

    /// Sorts a batch into the records the stage may see, in order, in `records` (emptied
    /// first, its capacity kept), and says what was dropped.
    mutating func admit(_ batch: some PolledBatch, into records: inout [InputRecord]) -> Admitted {
        var admitted = Admitted()
        var sightings = self.sightings
        self.sightings = []
        sightings.removeAll(keepingCapacity: true)
        for index in 0..<batch.count {
            switch batch.event(at: index) {
            case .record(let record): sightings.append((index, .record(partition: record.partition, offset: record.offset)))
            case .partitionEOF(let tp, let offset):
                sightings.append((index, tp.topic == topic ? .partitionEnd(partition: tp.partition, offset: offset) : .other))
            case .error(let error): admitted.errors.append(error)
            }
        }
        var taken = self.taken
        self.taken = []
        taken.removeAll(keepingCapacity: true)
        let sifted = sift(sightings, revocations: batch.revocations, taken: &taken)
        admitted.stale = sifted.stale
        admitted.gaps = sifted.gaps
        records.removeAll(keepingCapacity: true)
        for index in taken {
            if case .record(let record) = batch.event(at: index) { records.append(InputRecord(record)) }
        }
        self.sightings = sightings
        self.taken = taken
        return admitted
    }

    /// The guard itself, on what it needs of each event: the partition and offset of records,
    /// the ends of partitions, and which partitions were revoked after how many events (those
    /// gathered before belong to an assignment that no longer holds, even if the partition was
    /// assigned again since).
    mutating func sift(
        _ sightings: [(index: Int, sighting: Sighting)], revocations: [ConsumerBatch.Revocation], taken: inout [Int]
    ) -> Sifted {
        var sifted = Sifted()
        var revokedBefore: [Int32: Int] = [:]
        var allRevokedBefore = 0
        for revocation in revocations {
            guard let partitions = revocation.partitions else {
                allRevokedBefore = max(allRevokedBefore, revocation.before)
                continue
            }
            for tp in partitions where tp.topic == topic {
                revokedBefore[tp.partition] = max(revokedBefore[tp.partition] ?? 0, revocation.before)
            }
        }
        // Records come in runs of one partition: its state is taken out once per run.
        var current: TopicPartition?
        var state = TrackedPartition()
        var isOwned = false
        func putBack() {
            if let current, isOwned { owned[current] = state }
        }
        for (index, sighting) in sightings {
            switch sighting {
            case .record(let partition, let offset):
                if current?.partition != partition {
                    putBack()
                    let key = TopicPartition(topic: topic, partition: partition)
                    current = key
                    if let known = owned[key] {
                        state = known
                        isOwned = true
                    } else {
                        isOwned = false
                    }
                }
                guard isOwned, index >= max(allRevokedBefore, revokedBefore[partition] ?? 0), !restoring.contains(partition) else {
                    if isOwned, restoring.contains(partition) { slipped.insert(partition) }
                    sifted.stale += 1
                    continue
                }
                if let end = state.end, offset >= end {
                    state.atEnd = true
                    continue
                }
                switch state.offsets.admit(offset: offset) {
                case .stale:
                    sifted.stale += 1
                    continue
                case .gap(let skipped):
                    sifted.gaps.append((current!, offset - skipped, offset))
                case .take:
                    break
                }
                if let end = state.end, offset + 1 >= end { state.atEnd = true }
                taken.append(index)
            case .partitionEnd(let partition, let offset):
                putBack()
                current = nil
                let tp = TopicPartition(topic: topic, partition: partition)
                if let end = owned[tp]?.end, offset >= end { owned[tp]?.atEnd = true }
            case .other:
                continue
            }
        }
        putBack()
        return sifted
    }

    // MARK: Bounds

    /// Notes where each partition ends now; a partition already there is at its end.
    mutating func takeEnds(of partitions: [TopicPartition], from consumer: any ConsumerClient) throws {
        guard !partitions.isEmpty else { return }
        let ends = try consumer.endOffsets(partitions)
        let unknown = partitions.filter { owned[$0]?.offsets.nextToRead == nil }
        let beginnings = unknown.isEmpty ? [] : try consumer.beginningOffsets(unknown)
        for end in ends {
            guard var state = owned[end.topicPartition] else { continue }
            state.end = end.offset
            let start =
                state.offsets.nextToRead ?? beginnings.first { $0.topicPartition == end.topicPartition }?.offset ?? 0
            state.first = state.first ?? start
            if start >= end.offset { state.atEnd = true }
            owned[end.topicPartition] = state
        }
    }

    /// Every owned partition read to its end (a bounded run is done); a partition still being
    /// restored is not.
    var allAtEnd: Bool { !owned.isEmpty && restoring.isEmpty && owned.values.allSatisfy(\.atEnd) }

    /// Offsets read and to read over every partition's bounded range; nil until all are known.
    var boundedProgress: (done: Int64, total: Int64)? {
        guard !owned.isEmpty else { return nil }
        var done: Int64 = 0
        var total: Int64 = 0
        for state in owned.values {
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
