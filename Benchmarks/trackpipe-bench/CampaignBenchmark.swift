import ArgumentParser
import Benchmarking
import Foundation
import Kafka
import Pipeline
import RecordFormats
import Runner
import TrackingDomain
import Windowing

/// One delivery sent to millions of recipients, counted in one day-long window, in process:
/// what each commit writes to the state topic against what it added, what a retained broadlog
/// costs in memory, and the time per hit.
///
/// - The window task as a worker runs it (`AggregateStage` over raw hits, the changelog encoded
///   at every commit, no Kafka): each recipient's impression, then a click for one in five and an
///   open for one in ten a little later, in event-time order inside the day; a commit every
///   `--commit-every` hits (a commit interval's worth at a high rate).
/// - The engine alone, over the same hits, with and without keeping what a changelog needs
///   (`exportsChanges`, its changes handed out at every commit): memory per broadlog, and time
///   per hit, of tracking which broadlogs changed.
struct CampaignBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "campaign",
        abstract: "1e6 and 1e7 recipients of one delivery in a day-long window: state bytes per commit, memory per broadlog, time per hit.")

    @Option(parsing: .upToNextOption, help: "Recipients of the delivery (one run each).") var recipients = [1_000_000, 10_000_000]
    @Option(help: "Hits between two commits.") var commitEvery = 100_000
    @Option(help: "Hits per batch handed to the stage.") var batch = 2_000

    static let day: Int64 = 86_400_000
    static let base: Int64 = 1_795_305_600_000  // a day's start (UTC)

    /// The hits of `count` recipients, in event-time order: each recipient's impression, and a
    /// click (one in five) or an open (one in ten, of those that clicked or not) 3,000 recipients
    /// later.
    struct Hits {
        let recipients: Int
        var total: Int { recipients + recipients / 5 + recipients / 10 }

        /// Hit `index`: (recipient, action code, event time).
        func hit(_ index: Int) -> (recipient: Int, action: HitAction) {
            // Every 13 hits: 10 impressions, 2 clicks, 1 open, of recipients 3,000 behind.
            let group = index / 13, slot = index % 13
            if slot < 10 { return (group * 10 + slot, .impression) }
            let behind = max(0, group * 10 - 3_000)
            return slot == 10 ? (behind + 1, .click) : slot == 11 ? (behind + 6, .click) : (behind + 3, .open)
        }

        func time(_ index: Int) -> Int64 { CampaignBenchmark.base + Int64(index) * (CampaignBenchmark.day - 60_000) / Int64(max(1, total)) }
    }

    static func id(_ recipient: Int) -> String { "r" + String(100_000_000 + recipient) }

    func run() throws {
        print("campaign benchmark: one delivery, one day-long window, a commit every \(commitEvery) hits, batches of \(batch)")
        for count in recipients {
            let hits = Hits(recipients: count)
            try stage(hits)
            engine(hits, tracked: false)
            engine(hits, tracked: true)
        }
    }

    /// Counts what a commit sends to the state topic.
    struct CountingSink: RecordSink {
        var bytes = 0
        var records = 0
        var ends: [Int32: Int64] = [:]
        /// The state topic's partition as written, to read back.
        var written: [StateRecord] = []

        mutating func send(_ record: some OutgoingRecord) throws {
            guard record.destination == .changelog else { return }
            record.withBytes { key, value in
                bytes += (key?.count ?? 0) + (value?.count ?? 0)
                written.append(StateRecord(offset: Int64(records), key: key.map { Array($0) } ?? [], value: value.map { Array($0) }))
            }
            records += 1
            ends[record.partition ?? 0, default: 0] += 1
        }
    }

    /// The window task over raw hits, committing as a worker would.
    func stage(_ hits: Hits) throws {
        let window = WindowConfig(size: Self.day, grace: 10_000, retention: 3_600_000, idleTimeout: 3_600_000, maxEntries: .max)
        var stage = AggregateStage(
            input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000), window: window, shards: 1,
            identity: GroupIdentity(group: "campaign", inputTopic: "hits", windowSizes: window.lengths, repartitionTopic: nil, stateTopic: "campaign-state"))
        let heapBefore = HeapProbe.bytesInUse() ?? 0
        try stage.assign([PartitionStart(partition: 0)], now: 0)
        stage.restoreState([], partition: 0)
        try stage.stateRestored(partition: 0, now: 0)
        var sink = CountingSink()
        var processing = 0.0
        var committing = 0.0
        var commits: [(bytes: Int, records: Int, added: Int)] = []
        var entries = 0
        var index = 0
        var sinceCommit = 0
        var point: CommitPoint?
        while index < hits.total {
            let end = min(hits.total, index + batch)
            // The records of one batch, each a raw hit as a collector sends it, in one buffer.
            var bytes: [UInt8] = []
            var ranges: [Range<Int>] = []
            for at in index..<end {
                let (recipient, action) = hits.hit(at)
                let start = bytes.count
                bytes += Array("{\"deliveryId\":\"campaign-1\",\"broadlogId\":\"\(Self.id(recipient))\",\"action\":\"\(action.code)\",\"timestamp\":\(hits.time(at))}".utf8)
                ranges.append(start..<bytes.count)
            }
            let started = BenchSupport.now()
            try bytes.withUnsafeBytes { buffer in
                let records = ranges.enumerated().map { offset, range in
                    PolledRecord(
                        partition: 0, offset: Int64(index + offset), key: nil, value: UnsafeRawBufferPointer(rebasing: buffer[range]),
                        timestamp: hits.time(index + offset) + 1_000, headerCount: HeaderCount(of: nil) { _ in 0 })
                }
                try stage.process(records, now: Int64(index), into: &sink)
            }
            processing += BenchSupport.now() - started
            sinceCommit += end - index
            index = end
            if sinceCommit >= commitEvery || index == hits.total {
                sinceCommit = 0
                let before = (sink.bytes, sink.records)
                let began = BenchSupport.now()
                try stage.prepareCommit(into: &sink)
                try stage.completeCommit(changelogEnds: sink.ends, now: Int64(index), into: &sink)
                point = stage.commitPoints()[0]
                stage.committed([0])
                committing += BenchSupport.now() - began
                let now = stage.gauges().windows.total.entries
                commits.append((sink.bytes - before.0, sink.records - before.1, now - entries))
                entries = now
            }
        }
        // Less what the sink keeps of the state topic (to read it back below): its bytes, and
        // about 104 bytes of arrays per record.
        let heap = (HeapProbe.bytesInUse() ?? 0) - heapBefore - sink.bytes - sink.records * 104
        let perEntry = commits.map { Double($0.bytes) / Double(max(1, $0.added)) }
        let bytes = commits.map { Double($0.bytes) }
        print(
            String(
                format: "%@ recipients, window task: %d hits, %d commits; state written %@ in %d records (%.2f bytes per retained broadlog); per commit: median %.0f bytes (first %d, last %d) for %.0f entries added, %.1f to %.1f bytes per entry added (median %.1f); %.3f µs per hit (%.3f counting, %.3f in commits); heap +%.1f MB = %.1f bytes per broadlog",
                BenchSupport.grouped(Double(hits.recipients)), hits.total, commits.count, BenchSupport.grouped(Double(sink.bytes)),
                sink.records, Double(sink.bytes) / Double(max(1, entries)), BenchSupport.median(bytes), commits.first?.bytes ?? 0,
                commits.last?.bytes ?? 0, BenchSupport.median(commits.map { Double($0.added) }), perEntry.min() ?? 0, perEntry.max() ?? 0,
                BenchSupport.median(perEntry), (processing + committing) * 1e6 / Double(hits.total), processing * 1e6 / Double(hits.total),
                committing * 1e6 / Double(hits.total), Double(heap) / 1e6, Double(heap) / Double(max(1, entries))))
        withExtendedLifetime(stage) {}
        try restore(sink.written, point: point, window: window, entries: entries)
    }

    /// A new owner reads the state back: how long, and what the window costs once back.
    func restore(_ records: [StateRecord], point: CommitPoint?, window: WindowConfig, entries: Int) throws {
        let heapBefore = HeapProbe.bytesInUse() ?? 0
        let started = BenchSupport.now()
        var stage = AggregateStage(
            input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000), window: window, shards: 1,
            identity: GroupIdentity(group: "campaign", inputTopic: "hits", windowSizes: window.lengths, repartitionTopic: nil, stateTopic: "campaign-state"))
        try stage.assign([PartitionStart(partition: 0, committedOffset: point?.offset, metadata: point?.metadata, logStart: 0)], now: 0)
        stage.restoreState(records, partition: 0)
        try stage.stateRestored(partition: 0, now: 0)
        let seconds = BenchSupport.now() - started
        let heap = (HeapProbe.bytesInUse() ?? 0) - heapBefore
        print(
            String(
                format: "  read back by a new owner: %d records in %.2f s, %d broadlogs, heap +%.1f MB = %.1f bytes per broadlog", records.count, seconds,
                stage.gauges().windows.total.entries, Double(heap) / 1e6, Double(heap) / Double(max(1, entries))))
        withExtendedLifetime(stage) {}
    }

    /// The engine alone: memory per broadlog and time per hit, keeping what a changelog needs or not.
    func engine(_ hits: Hits, tracked: Bool) {
        let config = WindowConfig(size: Self.day, grace: 10_000, retention: 3_600_000, idleTimeout: 3_600_000, maxEntries: .max)
        let heapBefore = HeapProbe.bytesInUse() ?? 0
        let rssBefore = HeapProbe.residentBytes() ?? 0
        var engine = WindowEngine(config: config, exportsChanges: tracked)
        engine.assign(partitions: [0], now: 0)
        var elapsed = 0.0
        var exported = 0
        var index = 0
        var sinceExport = 0
        while index < hits.total {
            let end = min(hits.total, index + batch)
            let inputs = (index..<end).map { at -> WindowInput in
                let (recipient, action) = hits.hit(at)
                let event = TrackingEvent(
                    deliveryId: "campaign-1", broadlogId: BroadlogID(Self.id(recipient)), action: action, channel: .push, platform: .android,
                    eventTime: hits.time(at), shape: .sdkContextData)
                return WindowInput(event: event, partition: 0, offset: Int64(at))
            }
            let started = BenchSupport.now()
            _ = engine.process(inputs, now: Int64(index))
            sinceExport += end - index
            if tracked, sinceExport >= commitEvery || end == hits.total {
                sinceExport = 0
                exported += engine.exportChanges().windows.reduce(0) { $0 + $1.broadlogs.count }
            }
            elapsed += BenchSupport.now() - started
            index = end
        }
        let entries = engine.stats.windows.total.entries
        let heap = (HeapProbe.bytesInUse() ?? 0) - heapBefore
        let rss = (HeapProbe.residentBytes() ?? 0) - rssBefore
        print(
            String(
                format: "%@ recipients, engine %@: %.1f bytes per broadlog in the heap (%.1f MB), RSS +%.1f MB; %.3f µs per hit%@",
                BenchSupport.grouped(Double(hits.recipients)), tracked ? "keeping changes (exportsChanges)" : "without changes", Double(heap) / Double(max(1, entries)),
                Double(heap) / 1e6, Double(rss) / 1e6, elapsed * 1e6 / Double(hits.total),
                tracked ? String(format: ", %d broadlogs handed out in changes", exported) : ""))
        withExtendedLifetime(engine) {}
    }
}

