import ArgumentParser
import Benchmarking
import Foundation
import TrackingDomain
import Windowing
import HitGenerator
import Pipeline

/// Throughput of the windowing engine on one and two shards (several shards run on the
/// pipeline's lanes, as a replay's do), and its memory per retained entry, on a pre-generated
/// stream shaped like production traffic: a few thousand deliveries, short hex ids,
/// duplicates, mostly ordered event times with some disorder and a trickle of late corrections.
struct WindowingBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "windowing",
        abstract: "Events/s of the windowing engine (1 and 2 shards) and bytes per retained entry.")

    @Option(help: "Events in the throughput stream.")
    var events = 5_000_000

    @Option(help: "Distinct deliveries.")
    var deliveries = 2_000

    @Option(help: "Events per batch (one input partition per batch).")
    var batch = 1_000

    @Option(help: "Input partitions.")
    var partitions = 6

    @Option(help: "Events in the memory-measurement stream (nothing is evicted there).")
    var memoryEvents = 3_000_000

    @Option(help: "Timed repetitions per shard count; the best is reported.")
    var repeats = 2

    @Option(parsing: .upToNextOption, help: "Shard counts to time (the first is the baseline).")
    var shards: [Int] = [1, 2]

    func run() throws {
        // Memory first: it must not see the throughput stream being freed.
        memory()
        memoryKeepingChanges()
        print("generating \(events) events, \(deliveries) deliveries, \(partitions) partitions...")
        let stream = Self.generate(
            events: events, deliveries: deliveries, batch: batch, partitions: partitions, seed: 42)
        var results: [Int: (rate: Double, emitted: Int)] = [:]
        for shards in self.shards {
            var best = 0.0
            var emitted = 0
            for _ in 0..<repeats {
                let (rate, count) = Self.throughput(stream, shards: shards)
                best = max(best, rate)
                emitted = count
            }
            results[shards] = (best, emitted)
            print("shards=\(shards): \(BenchSupport.grouped(best)) events/s (records emitted: \(emitted))")
        }
        guard let first = self.shards.first, let baseline = results[first] else { return }
        for shards in self.shards.dropFirst() {
            guard let result = results[shards] else { continue }
            print("speed-up \(shards) shards vs \(self.shards[0]): \(Self.fixed(result.rate / baseline.rate, 2))x")
            if result.emitted != baseline.emitted { print("WARNING: emission counts differ between shard counts") }
        }
    }

    typealias Stream = (batches: [[WindowInput]], clock: [Int64])

    /// Event time advances by `eventsPerMinute`; each partition delivers batches in turn.
    /// Impressions introduce new broadlogs; clicks and opens go to recently seen broadlogs of
    /// the same delivery (so opens mostly follow clicks, and some clicks stay dismissals).
    static func generate(
        events: Int, deliveries: Int, batch: Int, partitions: Int, seed: UInt64, eventsPerMinute: Int64 = 50_000
    ) -> Stream {
        var rng = SplitMix64(seed: seed)
        let deliveryIds = (0..<deliveries).map { DeliveryID(String(0xd0000 + $0, radix: 16)) }
        var recent = [[BroadlogID]](repeating: [], count: deliveries)
        var nextBroadlog = 0x100000
        var offsets = [Int64](repeating: 0, count: partitions)
        var batches: [[WindowInput]] = []
        var clock: [Int64] = []
        batches.reserveCapacity(events / batch + 1)
        let base: Int64 = 1_795_300_000_000
        var produced = 0
        var previous: TrackingEvent?
        while produced < events {
            let partition = batches.count % partitions
            let count = min(batch, events - produced)
            var inputs: [WindowInput] = []
            inputs.reserveCapacity(count)
            for _ in 0..<count {
                let sequence = Int64(produced + inputs.count)
                var event: TrackingEvent
                if let previous, rng.next() % 100 < 3 {
                    event = previous  // SDK retry: the same hit again
                } else {
                    var time = base + sequence * 60_000 / eventsPerMinute
                    let roll = rng.next() % 1_000
                    if roll < 100 { time -= Int64(rng.next() % 5_000) }  // disorder within grace
                    if roll < 5 { time -= Int64(rng.next() % 600_000) }   // late correction
                    let delivery = Int(rng.next() % UInt64(deliveries))
                    let actionRoll = rng.next() % 100
                    let action: HitAction
                    let broadlog: BroadlogID
                    if actionRoll < 55 || recent[delivery].isEmpty {
                        action = .impression
                        broadlog = BroadlogID("h" + String(nextBroadlog, radix: 16))
                        nextBroadlog += 1
                        if recent[delivery].count < 64 {
                            recent[delivery].append(broadlog)
                        } else {
                            recent[delivery][Int(rng.next() % 64)] = broadlog
                        }
                    } else {
                        action = actionRoll < 85 ? .click : .open
                        broadlog = recent[delivery][Int(rng.next() % UInt64(recent[delivery].count))]
                    }
                    let platform: Platform = rng.next() % 2 == 0 ? .ios : .android
                    event = TrackingEvent(
                        deliveryId: deliveryIds[delivery], broadlogId: broadlog, action: action, channel: .push,
                        platform: platform, eventTime: time, shape: .sdkContextData)
                }
                previous = event
                inputs.append(WindowInput(event: event, partition: Int32(partition), offset: offsets[partition]))
                offsets[partition] += 1
            }
            produced += count
            batches.append(inputs)
            clock.append(Int64(batches.count) * 10)
        }
        return (batches, clock)
    }

    static func throughput(_ stream: Stream, shards: Int) -> (Double, Int) {
        var engine = WindowEngine(config: WindowConfig(), shards: shards)
        engine.assign(partitions: Array(Set(stream.batches.map { $0[0].partition })), now: 0)
        let lanes = Lanes(count: shards)
        var emitted = 0
        var hits = 0
        let seconds = BenchSupport.seconds {
            for (batch, now) in zip(stream.batches, stream.clock) {
                let out = engine.process(batch, now: now, on: lanes)
                emitted += out.emitted.count
                hits += batch.count
            }
            emitted += engine.flushAll(on: lanes).emitted.count
        }
        return (Double(hits) / seconds, emitted)
    }

    /// Windows that nothing evicts, for the memory measurements.
    static let retainingAll = WindowConfig(grace: 1 << 40, retention: 1 << 41, idleTimeout: 1 << 40, maxEntries: .max)

    /// Heap growth while a stream that evicts nothing is retained, divided by the retained
    /// entries the engine reports. Heap bytes in use come from glibc's `mallinfo2().uordblks`
    /// (exact allocator accounting); RSS growth from /proc/self/statm is printed as a cross-check
    /// (an upper bound: freed chunks stay resident).
    func memory() {
        let stream = Self.generate(
            events: memoryEvents, deliveries: deliveries, batch: batch, partitions: partitions, seed: 7)
        let heapBefore = HeapProbe.bytesInUse()
        let rssBefore = HeapProbe.residentBytes()
        var engine = WindowEngine(config: Self.retainingAll, shards: 1)
        for (batch, now) in zip(stream.batches, stream.clock) {
            _ = engine.process(batch, now: now)
        }
        let heapAfter = HeapProbe.bytesInUse()
        let rssAfter = HeapProbe.residentBytes()
        withExtendedLifetime(stream) {}  // the input must not be freed between the two probes
        let stats = engine.stats.windows.total
        let flushed = engine.flushAll().emitted
        var actionEntries = 0
        for record in flushed { actionEntries += record.uniqueImpressions + record.uniqueClicks + record.uniqueOpens }
        print("memory: \(BenchSupport.grouped(Double(stats.entries))) retained (window, delivery, broadlog) entries, "
            + "\(BenchSupport.grouped(Double(actionEntries))) (window, delivery, broadlog, action) entries, "
            + "\(BenchSupport.grouped(Double(stats.openWindows))) (delivery, window) records")
        if let heapBefore, let heapAfter {
            let bytes = Double(heapAfter - heapBefore)
            print("heap (mallinfo2) +\(BenchSupport.grouped(bytes)) bytes: "
                + "\(Self.fixed(bytes / Double(stats.entries), 1)) bytes per (window, delivery, broadlog) entry, "
                + "\(Self.fixed(bytes / Double(actionEntries), 1)) per (window, delivery, broadlog, action) entry")
        } else {
            print("heap: mallinfo2 not available on this platform")
        }
        if let rssBefore, let rssAfter {
            let bytes = Double(rssAfter - rssBefore)
            print("RSS +\(BenchSupport.grouped(bytes)) bytes: \(Self.fixed(bytes / Double(stats.entries), 1)) bytes per entry")
        }
    }

    /// What keeping a changelog's changes costs (a window task's engine, `exportsChanges`, its
    /// changes handed out every 100 batches, a commit's worth), against the same engine without,
    /// on one partition's stream (a changelog's engine counts one partition).
    func memoryKeepingChanges() {
        let stream = Self.generate(events: memoryEvents, deliveries: deliveries, batch: batch, partitions: 1, seed: 7)
        for tracked in [false, true] {
            let heapBefore = HeapProbe.bytesInUse()
            var engine = WindowEngine(config: Self.retainingAll, shards: 1, exportsChanges: tracked)
            let seconds = BenchSupport.seconds {
                for (index, (batch, now)) in zip(stream.batches, stream.clock).enumerated() {
                    _ = engine.process(batch, now: now)
                    if tracked && index % 100 == 99 { _ = engine.exportChanges() }
                }
            }
            let heapAfter = HeapProbe.bytesInUse()
            let entries = engine.stats.windows.total.entries
            let heap = heapBefore.flatMap { before in heapAfter.map { Self.fixed(Double($0 - before) / Double(entries), 1) } } ?? "?"
            print(
                "memory, one partition, \(tracked ? "keeping changes for a changelog" : "without changes"): \(heap) bytes per (window, delivery, broadlog) entry, \(BenchSupport.grouped(Double(stream.batches.count * batch) / seconds)) events/s")
            withExtendedLifetime(engine) {}
        }
    }

    static func fixed(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }
}
