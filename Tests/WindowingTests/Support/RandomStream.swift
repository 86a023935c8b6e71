import TrackingDomain
@testable import Windowing
import HitGenerator

/// Random multi-partition streams with duplicates, disorder and occasional very late hits,
/// cut into batches that each come from one partition (as a Kafka consumer delivers them).
struct RandomStream {
    var batches: [[WindowInput]]
    /// Wall-clock `now` for each batch.
    var clock: [Int64]

    static func make(
        seed: UInt64, hits: Int, partitions: Int32 = 3, deliveries: Int = 12, broadlogs: Int = 40,
        stepMs: Int64 = 37, disorderMs: Int64 = 3_000, veryLateEvery: Int = 50, veryLateMs: Int64 = 20_000,
        maxBatch: Int = 25
    ) -> RandomStream {
        var rng = SplitMix64(seed: seed)
        var offsets = [Int64](repeating: 0, count: Int(partitions))
        var batches: [[WindowInput]] = []
        var clock: [Int64] = []
        var time: Int64 = 1_795_300_000_000
        var now: Int64 = 10_000
        var produced = 0
        while produced < hits {
            let partition = Int32.random(in: 0..<partitions, using: &rng)
            let size = min(Int.random(in: 1...maxBatch, using: &rng), hits - produced)
            var batch: [WindowInput] = []
            for _ in 0..<size {
                time += Int64.random(in: 0...(2 * stepMs), using: &rng)
                var eventTime = time - Int64.random(in: 0...disorderMs, using: &rng)
                if Int.random(in: 0..<veryLateEvery, using: &rng) == 0 {
                    eventTime -= Int64.random(in: 0...veryLateMs, using: &rng)
                }
                let delivery = "d\(Int.random(in: 0..<deliveries, using: &rng))"
                let broadlog = "h\(String(Int.random(in: 0..<broadlogs, using: &rng), radix: 16))"
                let action = HitAction.allCases.randomElement(using: &rng)!
                let channel = Channel.allCases.randomElement(using: &rng)!
                let platform = Platform.allCases.randomElement(using: &rng)!
                let event = TrackingEvent(
                    deliveryId: DeliveryID(delivery), broadlogId: BroadlogID(broadlog), action: action, channel: channel,
                    platform: platform, eventTime: eventTime, shape: .sdkContextData)
                batch.append(WindowInput(event: event, partition: partition, offset: offsets[Int(partition)]))
                offsets[Int(partition)] += 1
            }
            produced += size
            now += Int64.random(in: 0...50, using: &rng)
            batches.append(batch)
            clock.append(now)
        }
        return RandomStream(batches: batches, clock: clock)
    }
}
