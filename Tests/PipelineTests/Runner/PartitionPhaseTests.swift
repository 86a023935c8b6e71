import Kafka
import Testing
@testable import Pipeline
@testable import Runner

/// A partition's phase in the runner, and what the tracker makes of each.
@Suite("partition phase")
struct PartitionPhaseTests {
    let tp = TopicPartition(topic: "hits", partition: 0)

    func apply(_ events: [PartitionPhase.Event], from phase: PartitionPhase) -> PartitionPhase {
        events.reduce(phase) { PartitionPhase.transition($0, on: $1) }
    }

    @Test("a partition whose state is read back: held back until it is in, a record dropped meanwhile remembered for the seek")
    func throughRestore() {
        #expect(apply([.taken], from: .starting) == .running)
        #expect(apply([.taken, .stateAwaited], from: .starting) == .awaitingRestore(slipped: false))
        #expect(apply([.taken, .stateAwaited, .recordDropped, .restoreBegan], from: .starting) == .restoring(slipped: true))
        #expect(apply([.taken, .stateAwaited, .restoreBegan, .recordDropped], from: .starting).slipped)
        #expect(apply([.taken, .stateAwaited, .restoreBegan, .stateIn], from: .starting) == .running)
        #expect(apply([.taken, .stateAwaited, .stateIn], from: .starting) == .running, "nothing to read: in at once")
    }

    @Test("events that do not apply leave the phase: a running partition does not go back to restoring, nor a starting one slip")
    func eventsThatDoNotApply() {
        #expect(apply([.recordDropped, .restoreBegan, .stateIn, .stateAwaited], from: .starting) == .starting)
        #expect(apply([.taken, .recordDropped, .restoreBegan, .stateIn], from: .running) == .running)
        #expect(apply([.stateAwaited, .taken], from: .restoring(slipped: false)) == .restoring(slipped: false))
    }

    @Test("which phases hold a partition back, and which wait on the cluster (what readiness counts)")
    func heldBack() {
        let phases: [PartitionPhase] = [.starting, .awaitingRestore(slipped: false), .restoring(slipped: false), .running]
        #expect(phases.map(\.isOwned) == [false, true, true, true])
        #expect(phases.map(\.awaitsState) == [false, true, true, false])
        #expect(phases.map(\.waitsOnCluster) == [true, true, false, false])
    }

    @Test("a starting partition is not owned: its records are dropped, it is neither committed nor at an end, and it is counted as held back until taken")
    func startingInTheTracker() {
        var tracker = PartitionTracker(topic: "hits")
        #expect(tracker.awaitStart([tp]) == [tp])
        #expect(tracker.awaitStart([tp]).isEmpty, "already waiting: not new")
        #expect(tracker.isEmpty && tracker[tp] == nil && !tracker.allAtEnd)
        #expect(tracker.starting == [tp] && tracker.waitingOnCluster() == 1)
        #expect(tracker.waitingOnCluster(apartFrom: [tp]) == 0)
        let sifted = tracker.sift([(0, .record(partition: 0, offset: 5))], revocations: [])
        #expect(sifted.taken.isEmpty && sifted.stale == 1)
        tracker.take(tp, committed: 5, metadata: nil)
        #expect(!tracker.isEmpty && tracker.starting.isEmpty && tracker.waitingOnCluster() == 0)
        #expect(tracker.sift([(0, .record(partition: 0, offset: 5))], revocations: []).taken == [0], "a record before the start did not slip it")
    }

    @Test("a partition whose restore could not begin waits on the cluster; once begun it does not; backpressure stops only running partitions")
    func restoreAndBackpressure() {
        var tracker = PartitionTracker(topic: "hits")
        let other = TopicPartition(topic: "hits", partition: 1)
        tracker.take(tp, committed: 0, metadata: nil)
        tracker.take(other, committed: 0, metadata: nil)
        tracker.apply(.stateAwaited, to: [0])
        #expect(tracker.awaitingRestore == [0] && tracker.waitingOnCluster() == 1)
        #expect(!tracker.flows(tp) && tracker.flows(other) && tracker.running == [other])
        tracker.apply(.restoreBegan, to: [0])
        #expect(tracker.awaitingRestore.isEmpty && tracker.waitingOnCluster() == 0 && !tracker.flows(tp))
        tracker.backpressured = true
        #expect(!tracker.flows(other) && tracker.running == [other], "paused, still running")
        tracker.release([tp, other])
        #expect(tracker.isEmpty && tracker.running.isEmpty)
    }
}
