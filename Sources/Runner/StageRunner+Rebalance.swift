import Kafka
import Logging

/// The runner's side of the group's moves, inside `poll` on the run thread: partitions
/// assigned (their starts read, their state read back), partitions revoked (committed first),
/// and where a bounded run's partitions end. Kept apart from the loop, which sees the group's
/// moves only through the tracker's phases.
extension StageRunner {
    // MARK: Bounds

    /// Once the upstream runner has finished, the ends of this runner's input are final.
    func takeUpstreamBound() {
        if let partitions = bound.upstreamBound(tracker) { takeEnds(of: partitions) }
    }

    /// Notes where the partitions end. A cluster that cannot say now (a leader moving, an
    /// outage) leaves them without an end, asked again at the next turns (`again`), which is
    /// said once: a bounded run ends only once it knows every end, and a leader change must
    /// not end it.
    private func takeEnds(of partitions: [TopicPartition], again: Bool = false) {
        guard let consumer = lifecycle.clients?.consumer else { return }
        do {
            let gaps = try tracker.takeEnds(of: partitions, from: consumer)
            observer.guarded(stale: 0, gaps: gaps, consumer: consumer, now: clock())
        } catch let error as KafkaError where error.severity == .transient {
            if !again {
                logger.warning(
                    "\(stage.name): cannot read where \(partitions.map(\.description).joined(separator: ", ")) end (\(error)): asking again at each turn")
            }
        } catch {
            lifecycle.fail(PipelineError.kafka("\(stage.name): cannot read the end offsets of \(settings.topic): \(error)"))
        }
    }

    // MARK: Rebalances (inside `poll`, on the run thread)

    func partitionsAssigned(_ partitions: [TopicPartition], startingAt explicit: [TopicPartitionOffset]? = nil) {
        let now = clock()
        control.assigned(at: now)
        committer.groupAssigned(at: now)
        observer.partitionsAssigned()
        guard let consumer = lifecycle.clients?.consumer, let mine = rebalance.claim(partitions) else { return }
        if let explicit {
            takeOver(mine, starts: RebalanceListener.starts(of: mine, committed: explicit), consumer: consumer, now: now)
        } else {
            readStartsAndTakeOver(mine, consumer: consumer, now: now)
        }
    }

    /// Reads where the partitions start, then takes them over. A cluster that does not answer
    /// (an outage in the middle of a rebalance) leaves them `starting`, paused, to be asked
    /// again at the next turns: an outage costs a pause, not the run.
    private func readStartsAndTakeOver(_ partitions: [TopicPartition], consumer: any ConsumerClient, now: Int64) {
        do {
            let starts = try rebalance.starts(of: partitions, readingFrom: consumer)
            takeOver(partitions, starts: starts, consumer: consumer, now: now)
        } catch let error as KafkaError where error.severity == .transient {
            let new = tracker.awaitStart(partitions)
            if !new.isEmpty {
                try? consumer.pause(new)
                logger.warning(
                    "\(stage.name): cannot read where \(new.map(\.description).joined(separator: ", ")) start (\(error)): holding them back and asking again at each turn")
            }
        } catch {
            lifecycle.fail(error)
        }
        control.heldBack(tracker.waitingOnCluster())
    }

    /// The partitions are this runner's from these starts: the tracker, the stage, the
    /// restore of their state.
    private func takeOver(_ mine: [TopicPartition], starts: [PartitionStart], consumer: any ConsumerClient, now: Int64) {
        for start in starts {
            let resumes = !start.commitIsBeyondTheLog
            if !resumes { rebalance.logCommitBeyondTheLog(start) }
            let tp = TopicPartition(topic: settings.topic, partition: start.partition)
            let committed = resumes ? start.committedOffset : nil
            let (readingFrom, lost) = InputLoss.start(of: tp, committed: committed, logStart: start.logStart)
            if let lost { observer.loss.found(lost, logStart: lost.to) }
            tracker.take(tp, committed: committed, metadata: start.metadata, readingFrom: readingFrom)
        }
        do {
            try stage.assign(starts, now: now)
        } catch {
            lifecycle.fail(error)
            return
        }
        // A stage that keeps state always has its restorer (`StateHooks`).
        let awaiting = Set(state?.partitionsAwaitingState(stage) ?? []).intersection(mine.map(\.partition))
        tracker.apply(.stateAwaited, to: Array(awaiting))
        let paused = mine.filter { !tracker.flows($0) }
        let flowing = mine.filter { tracker.flows($0) }
        do {
            try consumer.pause(paused)
            // Held back while their starts were asked again: they flow now.
            try consumer.resume(flowing)
        } catch {
            lifecycle.fail(PipelineError.kafka("\(stage.name): cannot hold back newly assigned partitions (the output is behind, or their state is being read back): \(error)"))
        }
        if case .endAtAssignment = settings.bound { takeEnds(of: mine) }
        rebalance.logAssigned(mine)
        if !awaiting.isEmpty { beginRestore(awaiting.sorted(), consumer: consumer, now: now) }
    }

    /// Starts reading the state of partitions back; a cluster that does not answer leaves them
    /// `awaitingRestore`, to be asked again at the next turns (`again`), which is said once.
    private func beginRestore(_ partitions: [Int32], again: Bool = false, consumer: any ConsumerClient, now: Int64) {
        guard var restorer else { return }
        do {
            let empty = try restorer.begin(partitions, now: now)
            self.restorer = restorer
            tracker.apply(.restoreBegan, to: partitions)
            for partition in empty { try stateIsIn(partition, consumer: consumer) }
        } catch let error as KafkaError where error.severity == .transient {
            if !again {
                logger.warning("\(stage.name): cannot begin reading the state of partitions \(partitions) back (\(error)): asking again at each turn")
            }
        } catch {
            lifecycle.fail(error as? PipelineError ?? .kafka("\(stage.name): cannot read the state of partitions \(partitions) back from \(restorer.topic): \(error)"))
        }
        control.heldBack(tracker.waitingOnCluster())
    }

    /// Asks again for what an unanswering cluster left waiting.
    func retryWaiting(_ consumer: any ConsumerClient) {
        let now = clock()
        let starting = tracker.starting
        if !starting.isEmpty { readStartsAndTakeOver(starting, consumer: consumer, now: now) }
        let awaitingRestore = tracker.awaitingRestore
        if !awaitingRestore.isEmpty { beginRestore(awaitingRestore, again: true, consumer: consumer, now: now) }
    }

    /// Asks again where partitions end that the cluster could not say when it was asked.
    func retryEnds() {
        guard bound.endsAreDue else { return }
        let unknown = tracker.withoutEnd
        if !unknown.isEmpty { takeEnds(of: unknown, again: true) }
    }

    func partitionsRevoking(_ partitions: [TopicPartition]) {
        control.heldBack(tracker.waitingOnCluster(apartFrom: partitions))
        let mine = rebalance.releasing(partitions, ownedBy: tracker)
        // Still starting: never taken over, nothing to give back.
        let starting = Set(tracker.starting)
        tracker.release(partitions.filter { starting.contains($0) })
        guard !mine.isEmpty else { return }
        do {
            try commit(only: Set(mine.map(\.partition)), patience: .bounded(Self.revokePatience))
        } catch {
            logger.error("\(stage.name): commit before revoke failed: \(error)")
            lifecycle.fail(error)
        }
        if var restorer {
            do {
                try restorer.cancel(mine.map(\.partition))
            } catch {
                lifecycle.fail(PipelineError.kafka("\(stage.name): cannot stop reading the state of revoked partitions: \(error)"))
            }
            self.restorer = restorer
        }
        stage.revoke(mine.map(\.partition))
        tracker.release(mine)
        purge?.released(mine)
        rebalance.logRevoked(mine)
    }

    func assignmentFailed(_ error: KafkaError) {
        lifecycle.fail(rebalance.refusal(error))
    }
}
