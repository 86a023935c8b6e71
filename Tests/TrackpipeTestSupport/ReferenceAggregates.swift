import HitGenerator
import TrackingDomain

/// The aggregates a correct worker must end with, computed the simplest way there is (sets
/// and counters over the generator's truth), sharing no code with the normalizer or the engine.
public struct ReferenceAggregates {
    public struct Counts: Equatable, CustomStringConvertible {
        public var impressions = 0, clicks = 0, opens = 0
        public var uniqueImpressions = 0, uniqueClicks = 0, uniqueOpens = 0, dismissals = 0
        public var channels: [String: Int] = ["push": 0, "local": 0, "unknown": 0]
        public var platforms: [String: Int] = ["ios": 0, "android": 0, "unknown": 0]

        public init() {}

        public var description: String {
            "impr \(impressions) clicks \(clicks) opens \(opens) u \(uniqueImpressions)/\(uniqueClicks)/\(uniqueOpens) dism \(dismissals) ch \(channels) pl \(platforms)"
        }
    }

    /// Keyed like the output topic: `<deliveryId>@<windowStart RFC 3339>`.
    public private(set) var byKey: [String: Counts] = [:]

    public init(_ hits: [GeneratedHit.Expected], windowSize: Int64) {
        var sets: [String: [HitAction: Set<String>]] = [:]
        for hit in hits {
            let start = Int64((Double(hit.eventTime) / Double(windowSize)).rounded(.down)) * windowSize
            let key = "\(hit.deliveryId)@\(CivilTime.rfc3339(epochMillis: start, offsetMinutes: 0, fractionDigits: 0))"
            var counts = byKey[key] ?? Counts()
            switch hit.action {
            case .impression: counts.impressions += 1
            case .click: counts.clicks += 1
            case .open: counts.opens += 1
            }
            counts.channels[hit.channel.name, default: 0] += 1
            counts.platforms[hit.platform.name, default: 0] += 1
            byKey[key] = counts
            sets[key, default: [:]][hit.action, default: []].insert(hit.broadlogId)
        }
        for (key, actions) in sets {
            let clicked = actions[.click] ?? []
            let opened = actions[.open] ?? []
            byKey[key]!.uniqueImpressions = actions[.impression]?.count ?? 0
            byKey[key]!.uniqueClicks = clicked.count
            byKey[key]!.uniqueOpens = opened.count
            byKey[key]!.dismissals = clicked.subtracting(opened).count
        }
    }

    /// Counts from an output record's JSON object, in the same form.
    public static func counts(fromJSON object: [String: Any]) -> Counts {
        var counts = Counts()
        counts.impressions = object["impressions"] as? Int ?? -1
        counts.clicks = object["clicks"] as? Int ?? -1
        counts.opens = object["opens"] as? Int ?? -1
        counts.uniqueImpressions = object["uniqueImpressions"] as? Int ?? -1
        counts.uniqueClicks = object["uniqueClicks"] as? Int ?? -1
        counts.uniqueOpens = object["uniqueOpens"] as? Int ?? -1
        counts.dismissals = object["dismissals"] as? Int ?? -1
        counts.channels = object["channels"] as? [String: Int] ?? [:]
        counts.platforms = object["platforms"] as? [String: Int] ?? [:]
        return counts
    }
}
