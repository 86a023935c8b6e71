import TrackingDomain

/// Generates a realistic, reproducible stream of raw tracking hits in arrival order.
///
/// It models what apps do (seed docs): an impression when the notification is shown, a click
/// when it is touched, and an open after the click when the app opens; each encoded in one of
/// the shapes A to G that matches the hit's channel and platform.
public struct HitStream: Sendable {
    let config: HitStreamConfig

    public init(_ config: HitStreamConfig) { self.config = config }

    /// How far after a notification is shown its last interaction can happen (ms): a click up
    /// to 60 s after the impression, an open up to 3 s after the click.
    public static let interactionReach: Int64 = 63_000

    /// How far after its event time a message can arrive (ms): a late hit up to 2 min, and its
    /// SDK retry up to 20 s after that. Arrival is never before the event time.
    static let arrivalReach: Int64 = 140_000

    /// The delivery ids of the stream; those at index multiple of `trackingOffEvery` minus one have tracking off.
    var deliveryIds: [String] {
        var rng = SplitMix64(seed: (config.deliverySeed ?? config.seed) ^ 0xD11E_11FE)
        var ids: [String] = []
        var seen = Set<String>()
        while ids.count < config.deliveries {
            let id = "d" + hex(rng.next() & 0xFFFFF, width: 5)
            if seen.insert(id).inserted { ids.append(id) }
        }
        return ids
    }

    public func isTrackingOff(deliveryIndex: Int) -> Bool {
        config.trackingOffEvery > 1 && deliveryIndex % config.trackingOffEvery == config.trackingOffEvery - 1
    }

    public func generate() -> [GeneratedHit] {
        var rng = SplitMix64(seed: config.seed)
        let deliveries = deliveryIds
        var recipientCounter = config.firstRecipient
        var hits = interactions(rng: &rng, deliveries: deliveries, recipientCounter: &recipientCounter).map(\.hit)
        let onDeliveries = deliveries.indices.filter { !isTrackingOff(deliveryIndex: $0) }
        for index in 0..<config.staleCount {
            let deliveryId = deliveries[onDeliveries[index % onDeliveries.count]]
            let eventTime = config.start - 86_400_000 + Int64(index) * 1_000
            recipientCounter += 1
            let broadlogId = "h" + hex(recipientCounter &* 2_654_435_761 & 0xFFFFFF, width: 6)
            let encoded = HitEncoder.encode(
                deliveryId: deliveryId, broadlogId: broadlogId, action: .impression, channel: .push, platform: .android,
                eventTime: eventTime, trackingOff: false, rng: &rng)
            hits.append(GeneratedHit(key: nil, value: encoded.bytes, kafkaTimestamp: eventTime, truth: .stale(encoded.expected)))
        }
        return hits
    }

    /// The stream without its stale hits (`count - staleCount` messages), each message with the moment it reaches Kafka, in
    /// arrival order: what a live producer needs to send every message no earlier than it
    /// arrives. `recipients` is the number of recipients used, so that the next batch can
    /// number its own after them (`firstRecipient`).
    package func generateTimed() -> (hits: [TimedHit], recipients: UInt64) {
        var rng = SplitMix64(seed: config.seed)
        var recipientCounter = config.firstRecipient
        let hits = interactions(rng: &rng, deliveries: deliveryIds, recipientCounter: &recipientCounter)
        return (hits, recipientCounter - config.firstRecipient)
    }

    private func interactions(rng: inout SplitMix64, deliveries: [String], recipientCounter: inout UInt64) -> [TimedHit] {
        var pending: [(arrival: Int64, sequence: Int, hit: GeneratedHit)] = []
        var sequence = 0
        let target = config.count - config.staleCount
        func add(_ hit: GeneratedHit, arrival: Int64) {
            pending.append((arrival, sequence, hit))
            sequence += 1
        }

        while pending.count < target {
            let deliveryIndex = Int.random(in: 0..<deliveries.count, using: &rng)
            let deliveryId = deliveries[deliveryIndex]
            let trackingOff = isTrackingOff(deliveryIndex: deliveryIndex)
            recipientCounter += 1
            let broadlogId = "h" + hex(recipientCounter &* 2_654_435_761 & 0xFFFFFF, width: 6)
            let platform: Platform = rng.chance(0.55) ? .android : .ios
            let channel: Channel = (!trackingOff && rng.chance(0.15)) ? .local : .push
            let device = rng.chance(0.8) ? Array("device-\(hex(rng.next() & 0xFFFFFFFF, width: 8))".utf8) : nil
            let shown = config.start + Int64.random(in: 0..<config.span, using: &rng)

            var interactions: [(HitAction, Int64)] = []
            // iOS does not wake a closed app, so its impressions are often missing.
            if rng.chance(platform == .ios ? 0.5 : 0.9) { interactions.append((.impression, shown)) }
            if rng.chance(0.45) {
                let clicked = shown + Int64.random(in: 1_000...60_000, using: &rng)
                interactions.append((.click, clicked))
                if rng.chance(0.65) { interactions.append((.open, clicked + Int64.random(in: 200...3_000, using: &rng))) }
            }
            for (action, eventTime) in interactions where pending.count < target {
                let encoded = HitEncoder.encode(
                    deliveryId: deliveryId, broadlogId: broadlogId, action: action, channel: channel, platform: platform,
                    eventTime: eventTime, trackingOff: trackingOff, rng: &rng)
                let truth: GeneratedHit.Truth = trackingOff ? .trackingOff : .counted(encoded.expected)
                let hit = GeneratedHit(key: device, value: encoded.bytes, kafkaTimestamp: eventTime, truth: truth)
                let late = rng.chance(config.lateRate)
                let arrival = eventTime + (late ? Int64.random(in: 30_000...120_000, using: &rng) : Int64.random(in: 0...2_000, using: &rng))
                add(hit, arrival: arrival)
                if rng.chance(config.duplicateRate) && pending.count < target {
                    add(hit, arrival: arrival + Int64.random(in: 1_000...20_000, using: &rng))
                }
                if rng.chance(config.badRate) && pending.count < target {
                    let (bytes, reason) = HitEncoder.bad(
                        deliveryId: deliveryId, broadlogId: broadlogId, eventTime: eventTime, rng: &rng)
                    add(GeneratedHit(key: device, value: bytes, kafkaTimestamp: eventTime, truth: .rejected(reason)), arrival: arrival)
                }
            }
        }

        pending.sort { ($0.arrival, $0.sequence) < ($1.arrival, $1.sequence) }
        return pending.map { ($0.arrival, $0.hit) }
    }
}

func hex(_ value: UInt64, width: Int) -> String {
    let text = String(value, radix: 16)
    return String(repeating: "0", count: max(0, width - text.count)) + text
}

/// A generated message and when it reaches Kafka (epoch ms), never before its event time.
package typealias TimedHit = (arrival: Int64, hit: GeneratedHit)
