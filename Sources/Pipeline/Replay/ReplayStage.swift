import RecordFormats
import Runner
import Kafka
import Windowing

/// The stage of `replay`: one window task over every partition of the input (`ReplayTask`), its
/// deliveries split by hash into shards that run on the lanes, so that it is exact whatever the
/// input's keys. It reads raw hits, and sends its aggregate records and dead letters at once:
/// it keeps no changelog and has no commit points, since nothing takes its work over.
struct ReplayStage: StatelessStage {
    /// Named as the worker's window stage is, in the summary and the progress lines.
    let name = "aggregate"
    /// The topic the hits are read from, named in dead letters.
    let sourceTopic: String
    let input: RawHitInput
    let window: WindowConfig
    /// How many shards the task has, and how many lanes run them at once.
    let shards: Int
    private let lanes: Lanes
    /// Only windows starting in this range are emitted, and only dead letters that belong to
    /// it are sent (a backfill of a time range).
    let range: Range<Int64>

    /// Created at the assignment, which tells it when it began.
    private var task: ReplayTask?
    private var pending = StageReport()
    private var emitter = AggregateEmitter()

    init(sourceTopic: String, input: RawHitInput, window: WindowConfig, shards: Int, range: Range<Int64> = Int64.min..<Int64.max) {
        self.sourceTopic = sourceTopic
        self.input = input
        self.window = window
        self.shards = max(1, shards)
        self.lanes = Lanes(count: self.shards)
        self.range = range
    }

    // MARK: Partitions

    mutating func assign(_ starts: [PartitionStart], now: Int64) throws {
        if task == nil { task = ReplayTask(config: window, shards: shards, now: now) }
        task?.engine.assign(partitions: starts.map(\.partition), now: now)
    }

    mutating func revoke(_ partitions: [Int32]) {
        task?.engine.revoke(partitions: partitions)
    }

    // MARK: Records

    mutating func process(_ records: [PolledRecord], now: Int64, into sink: inout some RecordSink) throws {
        guard !records.isEmpty else { return }
        guard task != nil else {
            // Records before any assignment (the runner's guard should have dropped them):
            // refused loudly, never counted nowhere.
            pending.accounting.staleDropped += records.count
            return
        }
        // The one task would decode on one thread: decode on every lane first, in contiguous
        // chunks, then count in order.
        let batch =
            shards > 1 && records.count >= 512 ? input.decodeInParallel(records, lanes: shards) : input.decode(records, at: records.indices)
        guard let counted = task?.count(batch, range: range, now: now, on: lanes) else { return }  // there is a task: checked above
        let (result, emitted) = counted
        pending.add(result.report)
        for letter in input.deadLetters(result.deadLetters, of: records, sourceTopic: sourceTopic) { try sink.send(letter) }
        try emit(emitted, now: now, into: &sink)
    }

    // MARK: Time

    mutating func tick(now: Int64, into sink: inout some RecordSink) throws {
        guard let output = task?.engine.advance(now: now, on: lanes) else { return }
        pending.capacityEvictions += output.capacityEvictions
        try emit(output.emitted, now: now, into: &sink)
    }

    mutating func finish(now: Int64, into sink: inout some RecordSink) throws {
        guard let output = task?.engine.flushAll(on: lanes) else { return }
        try emit(output.emitted, now: now, into: &sink)
    }

    /// Sends the records of windows that start in the range.
    private mutating func emit(_ aggregates: [WindowAggregate], now: Int64, into sink: inout some RecordSink) throws {
        let inRange = aggregates.filter { range.contains($0.windowStart) }
        try emitter.emit(inRange, now: now, report: &pending, into: &sink)
    }

    // MARK: Observation

    /// Nothing: a replay commits nothing.
    func commitPoints() -> [Int32: CommitPoint] { [:] }

    /// A replay commits nothing: nothing to send first.
    mutating func prepareCommit(into sink: inout some RecordSink) throws {}

    mutating func drainReport() -> StageReport { pending.drain() }

    func gauges() -> StageGauges {
        var gauges = StageGauges(counting: window)
        if let task { gauges.add(task.engine) }
        return gauges
    }
}
