import Windowing

/// `replay`'s one window task: every partition of the input counted together, exact whatever
/// the input's keys, by a single process that reads everything. Its deliveries are split by
/// hash into shards that run on the lanes. Unlike a partition's task (`AggregateTask`) it keeps
/// no changelog and has no commit point: nothing will take it over, so what it emits goes out
/// at once, and no record of its input is ever a replay of a previous owner's.
struct ReplayTask: WindowTask {
    var engine: WindowEngine
    var sources = TaskSources.partitionRead
    let createdAt: Int64
    /// Raw hits carry their originals: no writer's clock.
    var clockAtBatchStart: Int64? { nil }

    init(config: WindowConfig, shards: Int, now: Int64) {
        engine = WindowEngine(config: config, shards: shards)
        createdAt = now
    }

    /// Counts the batch, its shards on `lanes`; returns with what was counted the records to
    /// send.
    mutating func count(_ batch: DecodedBatch, range: Range<Int64>, now: Int64, on lanes: Lanes) -> (TaskResult, [WindowAggregate]) {
        let (result, output) = countBatch(batch, range: range, previousMark: nil, now: now, on: lanes)
        return (result, output.emitted)
    }
}
