import TrackingDomain
@testable import Windowing

/// Terse builders for hits in tests.
enum Hits {
    static func event(
        _ delivery: String, _ broadlog: String, _ action: HitAction, at time: Int64?,
        channel: Channel = .push, platform: Platform = .android
    ) -> TrackingEvent {
        TrackingEvent(
            deliveryId: DeliveryID(delivery), broadlogId: BroadlogID(broadlog), action: action, channel: channel,
            platform: platform, eventTime: time, shape: .sdkContextData)
    }

    static func input(
        _ delivery: String, _ broadlog: String, _ action: HitAction, at time: Int64,
        partition: Int32 = 0, offset: Int64, channel: Channel = .push, platform: Platform = .android
    ) -> WindowInput {
        WindowInput(
            event: event(delivery, broadlog, action, at: time, channel: channel, platform: platform),
            partition: partition, offset: offset)
    }
}

/// Keeps the last record per (delivery, windowStart), as a consumer of the output topic would.
struct LastRecords {
    struct Key: Hashable, Comparable {
        var delivery: DeliveryID
        var start: Int64
        static func < (a: Key, b: Key) -> Bool { (a.start, a.delivery) < (b.start, b.delivery) }
    }

    private(set) var records: [Key: WindowAggregate] = [:]
    private(set) var emissions = 0

    mutating func add(_ output: EngineOutput) {
        for record in output.emitted {
            records[Key(delivery: record.deliveryId, start: record.windowStart)] = record
            emissions += 1
        }
    }

    /// Records without their revision, to compare counts alone.
    var countsOnly: [Key: WindowAggregate] {
        records.mapValues { record in
            var copy = record
            copy.revision = 0
            return copy
        }
    }
}
