import TrackingDomain
@testable import Windowing

/// The obvious, slow recomputation the engine must agree with: sets of broadlogs per action
/// per (delivery, window), and a watermark recomputed from scratch as the minimum over
/// partitions of their highest event time (valid for tests where no partition goes idle).
struct ReferenceModel {
    struct Cell {
        var hits: [HitAction: Int] = [:]
        var broadlogs: [HitAction: Set<BroadlogID>] = [:]
        var channels = ChannelCounts()
        var platforms = PlatformCounts()
    }

    let config: WindowConfig
    /// The size of the windows it counts: the config's first, unless given.
    let size: Int64
    var cells: [LastRecords.Key: Cell] = [:]
    var highest: [Int32: Int64] = [:]
    var partitions: Set<Int32>
    var horizon = Int64.min
    /// (partition, offset) of every hit the reference calls too late.
    var tooLate: Set<[Int64]> = []

    init(config: WindowConfig, partitions: Set<Int32>, size: Int64? = nil) {
        self.config = config
        self.size = size ?? config.lengths[0]
        self.partitions = partitions
    }

    func start(of time: Int64) -> Int64 {
        var start = (time / size) * size
        if start > time { start -= size }
        return start
    }

    mutating func apply(batch: [WindowInput]) {
        for input in batch {
            let time = input.event.eventTime!
            let start = start(of: time)
            if start + size + config.retention <= horizon {
                tooLate.insert([Int64(input.partition), input.offset])
                continue
            }
            let key = LastRecords.Key(delivery: input.event.deliveryId, start: start)
            cells[key, default: Cell()].hits[input.event.action, default: 0] += 1
            cells[key, default: Cell()].broadlogs[input.event.action, default: []].insert(input.event.broadlogId)
            cells[key, default: Cell()].channels[input.event.channel] += 1
            cells[key, default: Cell()].platforms[input.event.platform] += 1
        }
        for input in batch {
            highest[input.partition] = max(highest[input.partition] ?? input.event.eventTime!, input.event.eventTime!)
        }
        if partitions.allSatisfy({ highest[$0] != nil }) {
            horizon = max(horizon, partitions.map { highest[$0]! }.min()!)
        }
    }

    var expected: [LastRecords.Key: WindowAggregate] {
        var result: [LastRecords.Key: WindowAggregate] = [:]
        for (key, cell) in cells {
            let clicked = cell.broadlogs[.click] ?? []
            let opened = cell.broadlogs[.open] ?? []
            result[key] = WindowAggregate(
                deliveryId: key.delivery, windowStart: key.start, windowEnd: key.start + size,
                impressions: cell.hits[.impression] ?? 0, clicks: cell.hits[.click] ?? 0,
                opens: cell.hits[.open] ?? 0,
                uniqueImpressions: cell.broadlogs[.impression]?.count ?? 0,
                uniqueClicks: clicked.count, uniqueOpens: opened.count,
                dismissals: clicked.subtracting(opened).count,
                channels: cell.channels, platforms: cell.platforms, revision: 0)
        }
        return result
    }
}
