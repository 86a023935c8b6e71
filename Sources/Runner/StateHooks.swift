/// What a runner asks of a stage that keeps state, taken from the stage's `StatefulStage`
/// conformance when the runner is made for one (`StageRunner.init(stage:stateTopic:…)`), with
/// the state topic it reads that state back from. A runner of a `StatelessStage` has none, so
/// its loop asks nothing of the kind: which stage keeps state is settled when the runner is
/// made, not found out during the run.
struct StateHooks<S: Stage> {
    let stateTopic: String
    let partitionsAwaitingState: (S) -> [Int32]
    let restoreState: (inout S, [StateRecord], Int32) -> Void
    let stateRestored: (inout S, Int32, Int64) throws -> Void
    let completeCommit: (inout S, [Int32: Int64], Int64, inout ProducerSink) throws -> Void
    let committed: (inout S, [Int32]) -> Void
    let holdsClosedWindows: (S) -> Bool
}

extension StateHooks where S: StatefulStage {
    init(stateTopic: String) {
        self.stateTopic = stateTopic
        partitionsAwaitingState = { $0.partitionsAwaitingState }
        restoreState = { stage, records, partition in stage.restoreState(records, partition: partition) }
        stateRestored = { stage, partition, now in try stage.stateRestored(partition: partition, now: now) }
        completeCommit = { stage, ends, now, sink in try stage.completeCommit(changelogEnds: ends, now: now, into: &sink) }
        committed = { stage, partitions in stage.committed(partitions) }
        holdsClosedWindows = { $0.holdsClosedWindows }
    }
}
