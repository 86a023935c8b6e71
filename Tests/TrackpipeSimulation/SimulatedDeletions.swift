import Kafka
import Pipeline

/// What the simulated brokers do with DeleteRecords requests (a runner purging the repartition
/// topic): each is carried out and answered `delay` after it was sent, so a request outlives the
/// rebalance, the crash or the takeover that follows it, as a real one does once it reached the
/// leaders; a cluster can refuse them for a while, or be out of reach, as a real one can.
///
/// It also holds the purge to the property the design rests on, as the cluster sees it (each
/// breach is a violation the checks report): a process asks only for partitions it owns, and
/// never past its group's commit; and no deletion ever takes a partition's log start past any
/// group's commit on it, so that whoever owns the partition next finds every record it needs.
final class RecordDeletions {
    /// How long after a request its deletion is carried out and answered (ms).
    var delay: Int64 = 0
    /// Every request refused with this error until then (clock ms): a cluster that does not
    /// delete records (`unsupportedFeature`, what both embedded brokers answer), an ACL without
    /// Delete (`topicAuthorizationFailed`), leaders that do not answer in time (`timedOut`).
    var refusal: (error: KafkaError.Named, until: Int64)?
    /// The planted `purgePastCommit` fault: the brokers delete each partition to its end,
    /// whatever the request asked.
    var deletesToTheEnd = false
    /// Partitions asked to be purged, purged, and refused.
    fileprivate(set) var asked = 0
    fileprivate(set) var purged = 0
    fileprivate(set) var refused = 0
    fileprivate var pending: [Pending] = []

    fileprivate struct Pending {
        var due: Int64
        var offsets: [TopicPartitionOffset]
        /// Answered with this error, nothing deleted.
        var failure: KafkaError.Named?
        var deleter: SimulatedDeleter
    }
}

extension SimulatedCluster {
    /// A request of `deleter`'s process, checked as the cluster sees it and carried out later.
    fileprivate func requestDeletion(_ offsets: [TopicPartitionOffset], timeout: Int64, from deleter: SimulatedDeleter) {
        let deletions = recordDeletions
        for offset in offsets {
            let owner = deleter.consumers().first { $0.isMember && $0.readPositions[offset.topicPartition] != nil }
            guard let owner else {
                violation("a purge of \(offset.topicPartition) below \(offset.offset) by a process that does not own it")
                continue
            }
            let committed = kafka.committed(group: owner.groupId, topic: offset.topic, partition: offset.partition)?.offset ?? 0
            if offset.offset > committed {
                violation("\(owner.groupId) asked to purge \(offset.topicPartition) below \(offset.offset), past its commit \(committed)")
            }
        }
        deletions.asked += offsets.count
        var request = RecordDeletions.Pending(due: now + deletions.delay, offsets: offsets, failure: nil, deleter: deleter)
        if isUnreachable {
            request.due = now + timeout
            request.failure = .timedOut
        } else if let refusal = deletions.refusal, refusal.until > now {
            request.failure = refusal.error
        }
        note("purge of \(offsets.map(\.description).joined(separator: " ")) requested\(request.failure.map { ", to be refused (\($0))" } ?? "")")
        deletions.pending.append(request)
    }

    /// Carries out and answers every request due by now, in the order they fall due.
    func settleDeletions() {
        let deletions = recordDeletions
        while let index = deletions.pending.indices.min(by: { deletions.pending[$0].due < deletions.pending[$1].due }),
            deletions.pending[index].due <= now
        {
            let request = deletions.pending.remove(at: index)
            let answer = request.offsets.map { offset -> RecordDeletion in
                let partition = offset.topicPartition
                if let failure = request.failure {
                    deletions.refused += 1
                    return RecordDeletion(
                        partition: partition, below: offset.offset,
                        outcome: .failure(RecordDeletionError(KafkaError(failure, "deleting the records of \(partition)"))))
                }
                let log = kafka.topic(partition.topic)
                guard offset.offset <= log.end(of: partition.partition) else {
                    deletions.refused += 1
                    return RecordDeletion(
                        partition: partition, below: offset.offset,
                        outcome: .failure(RecordDeletionError(KafkaError(.offsetOutOfRange, "deleting the records of \(partition)"))))
                }
                let start = log.deleteRecords(
                    partition: partition.partition, below: deletions.deletesToTheEnd ? log.end(of: partition.partition) : offset.offset)
                deletions.purged += 1
                for (group, committed) in kafka.commits(topic: partition.topic, partition: partition.partition).sorted(by: { $0.key < $1.key })
                where committed.offset < start {
                    violation("a purge moved the log start of \(partition) to \(start), past \(group)'s commit \(committed.offset): its next owner cannot read what it has not counted")
                }
                return RecordDeletion(partition: partition, below: offset.offset, outcome: .success(start))
            }
            note("purge answered: \(answer.map(\.description).joined(separator: "; "))")
            request.deleter.answers.append(answer)
        }
    }
}

/// The DeleteRecords client of one simulated process: its requests go to the cluster, and it
/// answers what the cluster has settled. A killed process's requests are carried out all the
/// same; their answers reach no one.
final class SimulatedDeleter: RecordDeletionClient {
    unowned let cluster: SimulatedCluster
    let life: ProcessLife
    /// The process's consumers: which partitions it owns, in which group.
    let consumers: () -> [SimulatedConsumer]
    fileprivate var answers: [[RecordDeletion]] = []

    init(cluster: SimulatedCluster, life: ProcessLife, consumers: @escaping () -> [SimulatedConsumer]) {
        self.cluster = cluster
        self.life = life
        self.consumers = consumers
    }

    func requestDeletion(below offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws {
        try life.check()
        cluster.requestDeletion(offsets, timeout: Int64(timeoutMilliseconds), from: self)
    }

    func answer(waitingMilliseconds: Int32) -> [RecordDeletion]? {
        guard !life.killed else { return nil }
        cluster.settleDeletions()
        return answers.isEmpty ? nil : answers.removeFirst()
    }
}
