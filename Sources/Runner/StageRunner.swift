import Kafka
import Logging

/// Drives one `Stage` against Kafka, as a loop over named parts: poll a batch and let the
/// `PartitionTracker` admit its records, hand them to the stage, let time pass (`tick`), serve
/// the `OutputChannel`, commit through the `CommitCoordinator` when due, and tell the
/// `RunnerObserver`. The group's moves come in through the `RebalanceListener`, librdkafka's
/// errors through the `KafkaErrorTriage`, a stage's state comes back from the state topic
/// through the `StateRestorer`, and other threads reach the run only through its
/// `RunnerControl`.
///
/// Everything that differs between `run`, `run --until-end`, the two stages of the scaled-out
/// worker and a replay is configuration (`RunnerSettings`): where partitions come from (and so
/// whether offsets are committed: a fixed assignment has no group to commit to), and where
/// reading stops.
///
/// Commit safety: an offset is committed only after every record sent so far is acknowledged,
/// and only as far as the stage's commit point, which is below anything it still holds.
package final class StageRunner<S: Stage>: RunnerPart, @unchecked Sendable {
    // @unchecked: every stored `var` is used only on the thread inside `run` (the rebalance
    // callbacks run inside its polls); other threads use only `control`, which is Sendable.

    let context: RunnerContext
    /// How other threads stop this run and ask about its health.
    package let control: RunnerControl
    let clock: @Sendable () -> Int64
    private let triage: KafkaErrorTriage

    // The parts. Each is reached through `self` and never held across a poll: a rebalance
    // callback inside the poll uses them too. Internal rather than private for that reason:
    // the rebalance half of the runner is an extension in a file of its own
    // (StageRunner+Rebalance.swift).
    var stage: S
    /// Every assigned partition and its phase.
    var tracker: PartitionTracker
    var rebalance: RebalanceListener
    var committer: CommitCoordinator
    var observer: RunnerObserver
    /// What the stage keeps in a state topic, for a `StatefulStage`; nil for a stateless one.
    let state: StateHooks<S>?
    var restorer: StateRestorer?
    /// Purges the input up to the commits, where the settings say (the repartition topic).
    var purge: PurgeCoordinator?
    /// The run's state, with its clients and its first fatal error.
    var lifecycle = RunnerLifecycle.idle

    /// The records of the batch in hand, kept from batch to batch for its buffer.
    private var inputs: [PolledRecord] = []
    /// Where the run stops, and whether it has.
    var bound: RunBound
    private var lastUnknownTopicLog: Int64 = .min / 2

    /// A runner of a stage that keeps no state.
    package convenience init(
        stage: S, settings: RunnerSettings, logger: Logger, metrics: StageMetrics? = nil,
        clock: @escaping @Sendable () -> Int64 = wallClockMillis, onProgress: (@Sendable (RunnerProgress) -> Void)? = nil
    ) where S: StatelessStage {
        self.init(stage: stage, state: nil, settings: settings, logger: logger, metrics: metrics, clock: clock, onProgress: onProgress)
    }

    /// A runner of a stage that keeps its state in `stateTopic` (the `.changelog` destination):
    /// it writes it there at each commit and reads it back when it takes partitions.
    package convenience init(
        stage: S, stateTopic: String, settings: RunnerSettings, logger: Logger, metrics: StageMetrics? = nil,
        clock: @escaping @Sendable () -> Int64 = wallClockMillis, onProgress: (@Sendable (RunnerProgress) -> Void)? = nil
    ) where S: StatefulStage {
        var settings = settings
        settings.destinations[.changelog] = stateTopic
        self.init(
            stage: stage, state: StateHooks(stateTopic: stateTopic), settings: settings, logger: logger, metrics: metrics, clock: clock,
            onProgress: onProgress)
    }

    private init(
        stage: S, state: StateHooks<S>?, settings: RunnerSettings, logger: Logger, metrics: StageMetrics?,
        clock: @escaping @Sendable () -> Int64, onProgress: (@Sendable (RunnerProgress) -> Void)?
    ) {
        self.stage = stage
        self.state = state
        let context = RunnerContext(stageName: stage.name, settings: settings, logger: logger, metrics: metrics)
        self.context = context
        self.clock = clock
        let control = RunnerControl(context, clock: clock)
        self.control = control
        triage = KafkaErrorTriage(context: context, control: control)
        tracker = PartitionTracker(topic: settings.topic)
        bound = RunBound(context)
        rebalance = RebalanceListener(context)
        committer = CommitCoordinator(context)
        observer = RunnerObserver(context, onProgress: onProgress)
        if let state { restorer = StateRestorer(context, stateTopic: state.stateTopic) }
    }

    /// Asks `run` to stop after the batch in flight; it then commits and returns. Any thread.
    package func requestStop() { control.requestStop() }

    /// The most a revoke waits for the broker to acknowledge what its commit sends (ms). The
    /// whole group waits for a revoke (librdkafka's rebalance timeout is max.poll.interval.ms,
    /// 300 s by default); a revoke that runs out commits nothing for the partitions it gives away,
    /// and their new owner reads on from their previous commit, as after a crash.
    static var revokePatience: Int64 { 10_000 }

    // MARK: The loop

    /// When the run began, and when the stage was last given the time (clock ms).
    private var startedAt: Int64 = 0
    private var lastTick: Int64 = 0

    /// Runs to the end: `begin`, `turn` until it says so, `finish`; on an error, `abandon`.
    package func run() throws -> StageSummary {
        try begin()
        do {
            while try turn() {}
            return try finish()
        } catch {
            abandon(error)
            throw error
        }
    }

    /// Creates the clients and takes the input. The steps of `run` are `package` so that the
    /// deterministic simulator can drive the real loop one turn at a time on its own clock.
    package func begin() throws {
        startedAt = clock()
        lastTick = startedAt
        control.started(at: startedAt)
        observer.begin(at: startedAt)
        committer.begin(at: startedAt)
        metrics?.gauges(stage.gauges(), now: startedAt)
        try start()
    }

    /// One turn of the loop: poll a batch (and, while state is read back, a batch of state), let
    /// time pass, serve the output, commit when due, report. False once the run should end: a
    /// stop was requested or the bound is reached.
    package func turn() throws -> Bool {
        guard let clients = lifecycle.clients, !control.isStopRequested else { return false }
        let consumer = clients.consumer
        if tracker.waitingOnCluster() > 0 { retryWaiting(consumer) }
        let restoring = restorer?.isRestoring == true
        let polled = try pollPhase(consumer, timeoutMilliseconds: restoring ? 10 : 100, output: clients)
        if restoring { try restorePhase(consumer) }
        try throwIfFailed()
        let now = clock()
        control.loopTurned(at: now)
        control.restoreStalled(for: restorer?.stalledFor(now: now) ?? 0)
        if !polled || now - lastTick >= settings.tickInterval {
            try punctuate(now: now, output: clients)
            lastTick = now
        }
        try serveOutput(clients)
        let commits = observer.timeline.commits
        if control.takeCommitRequest() || committer.isDue(now: now) {
            try commit()
        } else if let state, state.holdsClosedWindows(stage) && committer.takeEarlyCommit(now: now) {
            try commit()
            if observer.timeline.commits > commits { observer.timeline.earlyCommits += 1 }
        }
        try checkFirstOutput(clients)
        // Here, after a commit of the loop's own, and never after the revoke's (see `PurgeCoordinator`).
        if observer.timeline.commits > commits { purge?.afterCommit(tracker.committed, now: now) }
        purge?.collect()
        observer.turn(now: now, stage: &stage, tracker: tracker, consumer: consumer, awaitsAssignment: control.awaitsAssignment)
        takeUpstreamBound()
        retryEnds()
        if let refusal = bound.awaitOthers(now: now, tracker: tracker, assigned: !control.awaitsAssignment, logger: logger) {
            lifecycle.fail(refusal)
        }
        return !bound.isReached(tracker) && !control.isStopRequested
    }

    /// The end of a run that went well: last emissions, every record acknowledged, the last
    /// commit, then the group left.
    package func finish() throws -> StageSummary {
        guard let clients = lifecycle.clients else { throw PipelineError.kafka("\(stage.name): finish() before begin() or after the end") }
        try throwIfFailed()
        try finishRun(clients)
        return close(clients, started: startedAt)
    }

    /// The end of a run that failed: nothing more is committed; the group is left and what was
    /// counted reported.
    package func abandon(_ error: any Error) {
        lifecycle.fail(error)
        logger.error("\(stage.name): stopping without committing further: \(error)")
        lifecycle.clients?.consumer.close()
        lifecycle.close()
        purge = nil
        observer.report(stage: &stage, tracker: tracker, consumer: lifecycle.consumer, now: clock())
    }

    /// The run's totals so far, the stage's latest counts taken in first: what the summary will
    /// say if the run ended now. On the run's thread, between turns.
    package func currentTotals() -> Accounting {
        observer.report(stage: &stage, tracker: tracker, consumer: lifecycle.consumer, now: clock())
        return observer.totals
    }

    /// The stage's gauges (watermark, open windows) as of now. On the run's thread, between turns.
    package var gauges: StageGauges { stage.gauges() }

    /// The input found lost so far (what the summary will name). On the run's thread, between turns.
    public var lostInput: [InputSpan] { observer.loss.lost }

    /// Creates the clients and takes the input: a subscription, or the fixed assignment.
    private func start() throws {
        let output = try OutputChannel(context, control: control, onClientError: { [triage] in triage.clientError($0, client: "producer") })
        if let purging = settings.purge, settings.joinsGroup {
            purge = PurgeCoordinator(context, purge: purging, client: try output.producer.recordDeleter())
        }
        let consumer = try settings.clients.consumer(
            config: settings.consumer, logger: logger.with(label: "trackpipe.kafka.consumer"),
            rebalance: RebalanceHandler(
                partitionsAssigned: { [weak self] in self?.partitionsAssigned($0) },
                partitionsRevoking: { [weak self] in self?.partitionsRevoking($0) },
                assignmentFailed: { [weak self] in self?.assignmentFailed($0) }),
            maxBatch: settings.maxBatch, wakesFetcher: true, onError: { [triage] in triage.clientError($0, client: "consumer") })
        lifecycle = .running(RunnerClients(consumer: consumer, output: output))
        switch settings.assignment {
        case .group:
            // Said once, from the live client: what an operator compares with
            // kafka-consumer-groups --describe (and what the static-membership tests read).
            if let member = consumer.groupInstanceId {
                logger.notice("\(stage.name): joining group \(settings.group) as the static member \(member) (group.instance.id)")
            }
            try consumer.subscribe(topics: [settings.topic])
        case .fixed(let offsets):
            try consumer.assign(offsets)
            partitionsAssigned(offsets.map(\.topicPartition), startingAt: offsets)
        }
    }

    /// Polls one batch and hands what the guard admits to the stage; false if nothing came.
    /// Time in the stage counts as processing, the rest of the call as polling.
    private func pollPhase(_ consumer: any ConsumerClient, timeoutMilliseconds: Int32, output clients: RunnerClients) throws -> Bool {
        let begin = RunnerTimeline.now()
        var inBatch = 0.0
        let polled: Void? = try consumer.pollBatch(timeoutMilliseconds: timeoutMilliseconds) { batch in
            let admitted = tracker.admit(batch, into: &inputs)
            let now = clock()
            for error in admitted.errors {
                try triage.consumerError(
                    error, bounded: settings.isBounded, everAssigned: rebalance.everAssigned, now: now,
                    lastUnknownTopicLog: &lastUnknownTopicLog)
            }
            observer.guarded(stale: admitted.stale, gaps: admitted.gaps, consumer: consumer, now: now)
            observer.handedToStage(inputs.count)
            let processing = RunnerTimeline.now()
            defer { inBatch = observer.timeline.add(.processing, since: processing) - processing }
            try stage.process(inputs, now: clock(), into: &clients.output.sink)
        }
        observer.timeline.add(polled == nil ? .idlePolling : .polling, since: begin + inBatch)
        return polled != nil
    }

    /// Reads a batch of state back; partitions whose state is in may have their records.
    private func restorePhase(_ consumer: any ConsumerClient) throws {
        let begin = RunnerTimeline.now()
        defer { observer.timeline.add(.restoring, since: begin) }
        guard var restorer, let state else { return }
        let done = try restorer.step(now: clock(), timeoutMilliseconds: 20) { records, partition in
            state.restoreState(&stage, records, partition)
        }
        self.restorer = restorer
        for partition in done { try stateIsIn(partition, consumer: consumer) }
    }

    /// A partition's state is back: the stage checks it, and its input starts where the
    /// group's commit says (records that slipped through while it was held back were dropped).
    func stateIsIn(_ partition: Int32, consumer: any ConsumerClient) throws {
        try state?.stateRestored(&stage, partition, clock())
        let (start, needsSeek) = tracker.letThrough(partition)
        let tp = TopicPartition(topic: settings.topic, partition: partition)
        if needsSeek { try seek(consumer, tp, to: start ?? KafkaOffset.beginning) }
        if !tracker.backpressured { try consumer.resume([tp]) }
    }

    /// A seek waits for the partition's broker thread; a busy client (librdkafka's debug
    /// logging, a loaded machine) can keep it past the timeout, after which the seek may or may
    /// not have happened. Seeking to the same offset again is harmless, so it is asked again a
    /// few times before the run gives up.
    private func seek(_ consumer: any ConsumerClient, _ tp: TopicPartition, to offset: Int64) throws {
        var attempt = 1
        while true {
            do {
                return try consumer.seek([TopicPartitionOffset(tp, offset: offset)])
            } catch let error as KafkaError where error.isTimedOut && attempt < 6 {
                logger.warning("\(stage.name): seeking \(tp) back to its start took too long, asking again (attempt \(attempt + 1) of 6): \(error)")
                attempt += 1
            }
        }
    }

    /// Lets wall-clock time pass in the stage: idle sources, closing windows, marks.
    private func punctuate(now: Int64, output clients: RunnerClients) throws {
        let begin = RunnerTimeline.now()
        defer { observer.timeline.add(.ticking, since: begin) }
        try stage.tick(now: now, into: &clients.output.sink)
    }

    /// Delivery reports, then the input of the running partitions paused or resumed by how much
    /// output waits.
    private func serveOutput(_ clients: RunnerClients) throws {
        let begin = RunnerTimeline.now()
        try clients.output.serveReports()
        observer.timeline.add(.servingReports, since: begin)
        let change = try clients.output.backpressure(paused: tracker.backpressured) { pause in
            let running = tracker.running
            try pause ? clients.consumer.pause(running) : clients.consumer.resume(running)
        }
        if let change { tracker.backpressured = change }
    }

    private func throwIfFailed() throws {
        if let failure = lifecycle.failure { throw failure }
        if let error = control.clientFailure { throw triage.fatal(error) }
        if let failure = control.deliveryFailure { throw PipelineError.deliveryFailed(failure) }
    }

    /// The end of a bounded run or of a stop request: last emissions, every record
    /// acknowledged, the last commit.
    private func finishRun(_ clients: RunnerClients) throws {
        let begin = RunnerTimeline.now()
        if settings.isBounded { try stage.finish(now: clock(), into: &clients.output.sink) }
        observer.timeline.add(.finishing, since: begin)
        // What the stage found unread is judged while the consumer still reads the cluster.
        observer.report(stage: &stage, tracker: tracker, consumer: clients.consumer, now: clock())
        guard try clients.output.awaitAcknowledgements(timeline: &observer.timeline) else {
            logger.warning(
                "\(stage.name): stopping with \(clients.output.producer.outstanding) records the broker has not acknowledged within \(OutputChannel.stopGrace / 1000) s of the stop: not committing past the previous commit; the next start reads that input again")
            return
        }
        for writer in settings.lineOutputs.values { try writer.flush() }
        if settings.isBounded {
            for tp in tracker.sortedPartitions {
                if let read = tracker[tp], read.atEnd, let end = read.end { stage.readToEnd(tp.partition, end: end) }
            }
        }
        try commit()
        try checkFirstOutput(clients)
        if let failure = committer.lastFailure {
            let what = "\(stage.name): the last commit was refused (\(failure)): \(settings.topic) keeps the group's previous commit, and the next run reads on from there (what it reads again is recognised as counted: nothing is counted twice)"
            // A bounded run's exit 0 says its input is done: this one is not.
            if settings.isBounded { throw PipelineError.kafka("\(what). Run it again") }
            logger.error("\(what)")
        }
        if settings.isBounded { purge?.purgeAtEnd(tracker.committed, patience: 5_000) }
    }

    /// Whether the first records sent to the output were judged (`RunnerSettings.checkFirstOutput`).
    private var firstOutputChecked = false

    /// Once the stage has sent records to the output topic: waits for them to be acknowledged,
    /// then has the settings' check judge where they lie, before the run sends anything more (the
    /// loop calls it at the end of each turn, and the end of the run after its last commit). A
    /// cluster that does not answer is asked again until it does, or until a stop.
    private func checkFirstOutput(_ clients: RunnerClients) throws {
        guard let check = settings.checkFirstOutput, !firstOutputChecked, clients.output.sink.outputRecords > 0,
            try clients.output.awaitAcknowledgements(timeline: &observer.timeline)
        else { return }
        firstOutputChecked = true
        let written = clients.output.acknowledgedOutput, since = clock()
        while !control.isStopRequested {
            do {
                return try control.waitingOnKafka("the output topic to be read back", since: since) { try check(written) }
            } catch let error where PipelineError.isUnanswered(error) {
                logger.warning("\(stage.name): reading the output topic back after its first records, asking again: \(error)")
                _ = clients.output.producer.poll(timeoutMilliseconds: 1_000)  // a pause before the next question
            }
        }
    }

    /// Leaves the group and sums the run up.
    private func close(_ clients: RunnerClients, started: Int64) -> StageSummary {
        // Closing revokes the partitions, which forgets their offsets and their windows: read
        // them first.
        let committed = tracker.committed
        let gaugesAtEnd = stage.gauges()
        let begin = RunnerTimeline.now()
        let consumer = clients.consumer
        consumer.close()
        lifecycle.close()
        restorer?.close()
        purge = nil
        observer.timeline.add(.closing, since: begin)
        observer.report(stage: &stage, tracker: tracker, consumer: consumer, now: clock(), final: true)
        observer.onProgress?(observer.progress(tracker: tracker, now: clock(), finished: true))
        let output = clients.output
        observer.timeline.add(.producing, seconds: output.sink.sendSeconds)
        observer.timeline.total = observer.timeline.elapsed()
        return StageSummary(
            stage: stage.name, topic: settings.topic, accounting: observer.totals, elapsedMilliseconds: clock() - started,
            committed: committed, timeline: observer.timeline, pauses: output.pauses, largestBacklog: output.largestBacklog,
            offsetGaps: observer.gaps, lostInput: observer.loss.lost, gaugesAtEnd: gaugesAtEnd)
    }

    /// The stage's state changes are written and acknowledged first, then what it held back
    /// until they were (aggregate records) goes out, then the offsets are committed once that
    /// is acknowledged too.
    ///
    /// `patience` bounds the waits for acknowledgements: a commit whose records are not
    /// acknowledged in time is not made (the previous one holds), which is safe at any step.
    func commit(only partitions: Set<Int32>? = nil, patience: OutputChannel.Patience = .untilStopped) throws {
        committer.lastFailure = nil
        guard case .running(let clients) = lifecycle, settings.joinsGroup, !tracker.isEmpty else { return }
        let written = clients.output.sink.changelogRecords
        try stage.prepareCommit(into: &clients.output.sink)
        if clients.output.sink.changelogRecords > written {
            metrics?.changelogRecords(clients.output.sink.changelogRecords - written)
            guard try clients.output.awaitAcknowledgements(timeline: &observer.timeline, patience: patience) else {
                committer.lastFailure = "the state written for it was not acknowledged in time"
                logger.warning(
                    "\(stage.name): the state written for a commit was not acknowledged in time (the brokers that lead the state topic do not answer): not committing; the previous commit holds")
                return
            }
        }
        try state?.completeCommit(&stage, clients.output.acknowledgedChangelogEnds, clock(), &clients.output.sink)
        let committed = try committer.commit(
            stage.commitPoints(), only: partitions, now: clock(), tracker: &tracker, consumer: clients.consumer, output: &clients.output,
            patience: patience, timeline: &observer.timeline)
        state?.committed(&stage, committed)
    }
}
