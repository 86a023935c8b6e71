import Kafka
import Synchronization

/// The part of a running stage that other threads may touch: a stop request, the failures the
/// producer's and librdkafka's callbacks report, and what the health checks need to know. Everything
/// else a runner holds stays on the thread inside `StageRunner.run`, so this is the one place
/// where the runner's state is shared, and it is all atomics and one mutex.
package final class RunnerControl: RunnerPart, Sendable {
    /// The stage's name and what health messages quote, fixed at creation: nothing here reads
    /// the stage itself, which the run thread mutates.
    let context: RunnerContext
    let clock: @Sendable () -> Int64

    private let stopRequested = Atomic<Bool>(false)
    private let commitRequested = Atomic<Bool>(false)
    /// When the stop was first requested (clock ms); 0: not yet.
    private let stopRequestedMillis = Atomic<Int64>(0)
    private let failures = Mutex<Failures>(Failures())
    private let lastLoopMillis = Atomic<Int64>(0)
    private let startedMillis = Atomic<Int64>(0)
    /// When the group last handed this member an assignment (possibly empty); 0: never.
    private let assignedMillis = Atomic<Int64>(0)
    /// How long the slowest restore of window state has read nothing (ms); 0: none stalled.
    private let restoreStalledMillis = Atomic<Int64>(0)
    /// Assigned partitions held back because the cluster did not say where they start, or
    /// their state could not be read back yet.
    private let heldBackPartitions = Atomic<Int>(0)
    /// What the run thread waits for from the cluster, and since when (a flush, a commit): such
    /// a wait is not a stuck loop, however long the cluster takes.
    private let kafkaWait = Mutex<(what: String, since: Int64)?>(nil)

    struct Failures {
        /// The first record the broker refused, as "topic[partition]: error".
        var delivery: String?
        /// The first fatal error librdkafka's error callback reported.
        var client: KafkaError?
    }

    init(_ context: RunnerContext, clock: @escaping @Sendable () -> Int64) {
        self.context = context
        self.clock = clock
    }

    // MARK: Stopping

    /// Asks the run to stop after the batch in flight; it then commits and returns. Any thread.
    package func requestStop() {
        _ = stopRequestedMillis.compareExchange(expected: 0, desired: max(1, clock()), ordering: .relaxed)
        stopRequested.store(true, ordering: .sequentiallyConsistent)
    }

    var isStopRequested: Bool { stopRequested.load(ordering: .relaxed) }

    /// Asks the loop to commit at its next turn, whatever the commit interval (Kafka Streams'
    /// `ProcessorContext.commit()`): a caller that chooses its own commit points, such as the
    /// deterministic simulator, whose schedules commit where they want to cut. Any thread.
    package func requestCommit() { commitRequested.store(true, ordering: .relaxed) }

    /// Whether a commit was requested since the last call (the request is taken).
    func takeCommitRequest() -> Bool { commitRequested.exchange(false, ordering: .relaxed) }

    /// How long ago the stop was requested (ms); nil while it was not.
    var sinceStopRequested: Int64? {
        let at = stopRequestedMillis.load(ordering: .relaxed)
        return at == 0 ? nil : clock() - at
    }

    /// A record was refused: the run stops, and commits nothing past it.
    func deliveryFailed(_ text: String) {
        failures.withLock { if $0.delivery == nil { $0.delivery = text } }
        requestStop()
    }

    /// librdkafka reported an error retrying cannot fix: the run stops.
    func clientFailed(_ error: KafkaError) {
        failures.withLock { if $0.client == nil { $0.client = error } }
        requestStop()
    }

    var deliveryFailure: String? { failures.withLock { $0.delivery } }
    var clientFailure: KafkaError? { failures.withLock { $0.client } }

    // MARK: Liveness and readiness, for `/health/live` and `/health/ready`

    func started(at now: Int64) { startedMillis.store(now, ordering: .relaxed) }
    func loopTurned(at now: Int64) { lastLoopMillis.store(now, ordering: .relaxed) }
    func assigned(at now: Int64) { assignedMillis.store(now, ordering: .relaxed) }
    func restoreStalled(for millis: Int64) { restoreStalledMillis.store(millis, ordering: .relaxed) }
    func heldBack(_ count: Int) { heldBackPartitions.store(count, ordering: .relaxed) }

    /// Runs `body`, a call that waits for the cluster, marked as such: liveness does not count
    /// the wait against the loop (restarting would not make the cluster answer), readiness does
    /// once it is long.
    func waitingOnKafka<R>(_ what: @autoclosure () -> String, since: Int64? = nil, _ body: () throws -> R) rethrows -> R {
        let start = since ?? clock()
        kafkaWait.withLock { $0 = (what(), start) }
        defer {
            kafkaWait.withLock { $0 = nil }
            loopTurned(at: clock())
        }
        return try body()
    }

    /// A group member that has not been given partitions yet.
    var awaitsAssignment: Bool { settings.joinsGroup && assignedMillis.load(ordering: .relaxed) == 0 }

    /// nil while the run's loop is turning (or waiting on the cluster); else why not: a stuck
    /// call or stage, which is what a restart fixes.
    package var livenessProblem: String? {
        if let failure = deliveryFailure { return "\(stageName): delivery failed: \(failure)" }
        guard kafkaWait.withLock({ $0 }) == nil else { return nil }
        let now = clock()
        let last = lastLoopMillis.load(ordering: .relaxed)
        if last > 0 && now - last > settings.unhealthyAfter {
            return "\(stageName): the consume loop has not turned for \((now - last) / 1000) s (stuck in a stage or in a call to Kafka that should not wait)"
        }
        return nil
    }

    /// nil while the run does its work; else why not: the cluster keeps it waiting, it has no
    /// partitions yet, or its state does not come back. Not live is not ready either.
    package var readinessProblem: String? {
        if let problem = livenessProblem { return problem }
        let now = clock()
        if let wait = kafkaWait.withLock({ $0 }), now - wait.since > settings.unhealthyAfter {
            return "\(stageName): waiting \((now - wait.since) / 1000) s for \(wait.what) (check the brokers that lead the output topics and the group coordinator)"
        }
        let held = heldBackPartitions.load(ordering: .relaxed)
        if held > 0 {
            return "\(stageName): \(held) assigned partitions of \(topic) wait for the cluster to say where they start (their commits, or their state)"
        }
        let stalled = restoreStalledMillis.load(ordering: .relaxed)
        if stalled > settings.unhealthyAfter {
            return "\(stageName): reading window state back from the state topic has got nothing for \(stalled / 1000) s (check the brokers that lead the state topic's partitions)"
        }
        if awaitsAssignment {
            let started = startedMillis.load(ordering: .relaxed)
            return "\(stageName): the group \(group) has not assigned partitions of \(topic) yet\(started > 0 ? " (\((now - started) / 1000) s)" : "") (a restarted member waits about session.timeout.ms; otherwise check the group coordinator)"
        }
        return nil
    }
}

/// The runners of one process, for stopping them all and asking whether all are healthy; a
/// runner registered after a stop request is stopped at once.
///
/// It also keeps each runner, and so its Kafka clients, alive as long as itself: after some
/// fatal errors librdkafka 2.0.2 cannot destroy a consumer (it waits for ever for a topic that
/// was deleted, or trips an assertion in its sticky assignor), so `trackpipe run` exits on a
/// failure before the pipeline, and with it the clients, is released.
package final class RunnerRegistry: Sendable {
    private let state = Mutex<(controls: [RunnerControl], owners: [any Sendable], stopped: Bool)>(([], [], false))

    package init() {}

    package func register<S: Stage>(_ runner: StageRunner<S>) {
        let control = runner.control
        let stopped = state.withLock { state in
            state.controls.append(control)
            state.owners.append(runner)
            return state.stopped
        }
        if stopped { control.requestStop() }
    }

    package func requestStop() {
        let controls = state.withLock { state in
            state.stopped = true
            return state.controls
        }
        for control in controls { control.requestStop() }
    }

    package var isStopRequested: Bool { state.withLock { $0.stopped } }

    package var livenessProblem: String? {
        state.withLock { $0.controls }.lazy.compactMap(\.livenessProblem).first
    }

    package var readinessProblem: String? {
        state.withLock { $0.controls }.lazy.compactMap(\.readinessProblem).first
    }
}
