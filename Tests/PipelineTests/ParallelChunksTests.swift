import HitGenerator
import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline

/// The lanes are the pipeline's one layer of shards: they run window tasks, and the shards
/// of a replay's one task (`ReplayStageTests`). Whatever they run, output must be what running
/// it in turn gives.
@Suite("lanes")
struct ParallelChunksTests {
    @Test("every item is worked on once, by index, its changes kept, its result in item order", arguments: [1, 2, 3, 8])
    func inParallelWorksEachItemOnce(lanes: Int) {
        for count in [0, 1, 2, 7, 64] {
            var items = (0..<count).map { [$0] }
            let results = inParallel(&items, lanes: lanes) { item, index -> Int in
                item.append(index * 10)
                return item[0] * 100 + index
            }
            #expect(results == (0..<count).map { $0 * 101 })
            #expect(items == (0..<count).map { [$0, $0 * 10] })
        }
    }

    /// Batches of one partition each, with disorder, hits past retention and repeated broadlogs.
    static func stream(seed: UInt64, hits: Int, partitions: Int32) -> (batches: [[WindowInput]], clock: [Int64]) {
        var rng = SplitMix64(seed: seed)
        var offsets = [Int64](repeating: 0, count: Int(partitions))
        var batches: [[WindowInput]] = []
        var clock: [Int64] = []
        var time: Int64 = 1_795_300_000_000
        var produced = 0
        while produced < hits {
            let partition = Int32.random(in: 0..<partitions, using: &rng)
            let size = min(Int.random(in: 1...60, using: &rng), hits - produced)
            var batch: [WindowInput] = []
            for _ in 0..<size {
                time += Int64.random(in: 0...60, using: &rng)
                var eventTime = time - Int64.random(in: 0...3_000, using: &rng)
                if Int.random(in: 0..<40, using: &rng) == 0 { eventTime -= Int64.random(in: 0...20_000, using: &rng) }
                let event = TrackingEvent(
                    deliveryId: DeliveryID("d\(Int.random(in: 0..<200, using: &rng))"), broadlogId: BroadlogID("b\(Int.random(in: 0..<50, using: &rng))"),
                    action: HitAction.allCases.randomElement(using: &rng)!, channel: .push, platform: .ios, eventTime: eventTime,
                    shape: .sdkContextData)
                batch.append(WindowInput(event: event, partition: partition, offset: offsets[Int(partition)]))
                offsets[Int(partition)] += 1
            }
            produced += size
            batches.append(batch)
            clock.append(Int64(batches.count) * 20)
        }
        return (batches, clock)
    }

    @Test("an engine's shards run on the lanes give what one shard gives, memory cap included")
    func engineShardsOnTheLanes() {
        let stream = Self.stream(seed: 11, hits: 30_000, partitions: 4)
        for config in [
            WindowConfig(size: 1_000, grace: 300, retention: 4_000, idleTimeout: 1 << 40),
            WindowConfig(size: 1_000, grace: 300, retention: 4_000, idleTimeout: 1 << 40, maxEntries: 100),
        ] {
            func run(shards: Int, on runner: some ShardRunner) -> (outputs: [EngineOutput], flush: EngineOutput, engine: WindowEngine) {
                var engine = WindowEngine(config: config, shards: shards)
                engine.assign(partitions: [0, 1, 2, 3], now: 0)
                let outputs = zip(stream.batches, stream.clock).map { batch, now in engine.process(batch, now: now, on: runner) }
                let flush = engine.flushAll(on: runner)
                return (outputs, flush, engine)
            }
            let one = run(shards: 1, on: ShardsInTurn())
            #expect(one.outputs.reduce(0) { $0 + $1.emitted.count } > 1_000)
            #expect(one.outputs.contains { !$0.tooLate.isEmpty })
            if config.maxEntries < 10_000 { #expect(one.outputs.contains { !$0.capacityEvictions.isEmpty }) }
            for (shards, lanes) in [(2, 2), (8, 3)] {
                let many = run(shards: shards, on: Lanes(count: lanes))
                #expect(one.outputs.map(\.emitted) == many.outputs.map(\.emitted))
                #expect(one.outputs.map { $0.tooLate.map(\.offset) } == many.outputs.map { $0.tooLate.map(\.offset) })
                #expect(one.outputs.map(\.capacityEvictions) == many.outputs.map(\.capacityEvictions))
                #expect(one.flush.emitted == many.flush.emitted)
                #expect(one.engine.stats == many.engine.stats)
            }
        }
    }
}
