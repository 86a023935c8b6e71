import TrackingDomain

/// State of one delivery in one window: which actions each broadlog has shown, plus running
/// counters, so an emission is O(1) and never rescans the broadlogs.
///
/// A broadlog costs one table entry (its id, inline for ids up to 15 UTF-8 bytes, and a
/// one-byte action mask), which keeps a retained entry well under 64 bytes.
struct DeliveryWindow: Sendable {
    static let clickBit: UInt8 = 1 << HitAction.click.rawValue
    static let openBit: UInt8 = 1 << HitAction.open.rawValue

    /// Action bitmask per broadlog; never zero for a present one.
    var broadlogs = BroadlogSet()
    // Counters are 32-bit to keep the per-window overhead small; 2^32 hits of one delivery in
    // one window is far beyond any real traffic, and they wrap rather than trap.
    var impressions: UInt32 = 0
    var clicks: UInt32 = 0
    var opens: UInt32 = 0
    var uniqueImpressions: UInt32 = 0
    var uniqueClicks: UInt32 = 0
    var uniqueOpens: UInt32 = 0
    var dismissals: UInt32 = 0
    var push: UInt32 = 0
    var local: UInt32 = 0
    var unknownChannel: UInt32 = 0
    var ios: UInt32 = 0
    var android: UInt32 = 0
    var unknownPlatform: UInt32 = 0
    /// Changed since the last emission (only tracked once the window has been emitted).
    var dirty = false
    /// The input position (`WindowInput.position`) of the last hit counted, kept only by stores
    /// that export their changes for a changelog: a restored window skips replayed hits it already holds.
    var countedThrough: Int64 = .min
    /// The revision of the last record emitted; 0 when none was.
    var emittedRevision: UInt32 = 0
    /// Changed since its state was last handed out for the changelog.
    var stateChanged = false

    /// Outcome of one `record` call, for the store's bookkeeping.
    struct Change {
        var newEntry: Bool
        var becameDirty: Bool
        /// The window already held this hit (its offset is at or below `countedThrough`).
        var alreadyCounted = false
        /// The hit changed state not yet handed out for the changelog.
        var becameStateChanged = false
    }

    @inline(__always)
    private static func isDismissal(_ mask: UInt8) -> Bool {
        mask & (clickBit | openBit) == clickBit
    }

    /// Counts one hit. `trackDirty` is set once the window has been emitted, so that the
    /// store learns which records need a corrected re-emission.
    @inline(__always)
    mutating func record(
        broadlogId: String, action: HitAction, channel: Channel, platform: Platform, trackDirty: Bool, position: Int64 = 0,
        exportsChanges: Bool = false
    ) -> Change {
        var becameStateChanged = false
        if exportsChanges {
            if position <= countedThrough { return Change(newEntry: false, becameDirty: false, alreadyCounted: true) }
            countedThrough = position
            if !stateChanged {
                stateChanged = true
                becameStateChanged = true
            }
        }
        let bit: UInt8 = 1 << action.rawValue
        let old = broadlogs.merge(broadlogId, bit)
        let isNewForAction = old & bit == 0
        switch action {
        case .impression:
            impressions &+= 1
            if isNewForAction { uniqueImpressions &+= 1 }
        case .click:
            clicks &+= 1
            if isNewForAction { uniqueClicks &+= 1 }
        case .open:
            opens &+= 1
            if isNewForAction { uniqueOpens &+= 1 }
        }
        if isNewForAction {
            let was = Self.isDismissal(old)
            let now = Self.isDismissal(old | bit)
            if was != now {
                if now { dismissals &+= 1 } else { dismissals &-= 1 }
            }
        }
        switch channel {
        case .push: push &+= 1
        case .local: local &+= 1
        case .unknown: unknownChannel &+= 1
        }
        switch platform {
        case .ios: ios &+= 1
        case .android: android &+= 1
        case .unknown: unknownPlatform &+= 1
        }
        var becameDirty = false
        if trackDirty && !dirty {
            dirty = true
            becameDirty = true
        }
        return Change(newEntry: old == 0, becameDirty: becameDirty, becameStateChanged: becameStateChanged)
    }

    // MARK: State

    func state(deliveryId: String, windowStart: Int64) -> WindowState {
        WindowState(
            deliveryId: deliveryId, windowStart: windowStart,
            counters: [
                impressions, clicks, opens, uniqueImpressions, uniqueClicks, uniqueOpens, dismissals, push, local, unknownChannel,
                ios, android, unknownPlatform,
            ],
            broadlogs: exportedBroadlogs, countedThrough: countedThrough,
            emittedRevision: emittedRevision)
    }

    /// The window a state describes (nil if its counters are malformed).
    init?(_ state: WindowState) {
        guard state.counters.count == WindowState.counterNames.count else { return nil }
        let c = state.counters
        (impressions, clicks, opens, uniqueImpressions, uniqueClicks, uniqueOpens, dismissals) = (c[0], c[1], c[2], c[3], c[4], c[5], c[6])
        (push, local, unknownChannel, ios, android, unknownPlatform) = (c[7], c[8], c[9], c[10], c[11], c[12])
        broadlogs = BroadlogSet(minimumCapacity: state.broadlogs.count)
        for entry in state.broadlogs where entry.actions != 0 { _ = broadlogs.merge(entry.id, entry.actions) }
        countedThrough = state.countedThrough
        emittedRevision = state.emittedRevision
    }

    init() {}

    private var exportedBroadlogs: [WindowState.BroadlogActions] {
        var list: [WindowState.BroadlogActions] = []
        list.reserveCapacity(broadlogs.count)
        broadlogs.forEach { list.append(WindowState.BroadlogActions(id: $0, actions: $1)) }
        return list
    }

    /// Hits counted so far: the record's revision. It grows with every correction (each one
    /// adds at least a hit) and is the same whoever rebuilds the window from the same input,
    /// so it never goes backwards across restarts, rebalances or instances.
    var hitCount: Int { Int(impressions) + Int(clicks) + Int(opens) }

    func aggregate(deliveryId: String, start: Int64, end: Int64) -> WindowAggregate {
        WindowAggregate(
            deliveryId: deliveryId, windowStart: start, windowEnd: end,
            impressions: Int(impressions), clicks: Int(clicks), opens: Int(opens),
            uniqueImpressions: Int(uniqueImpressions), uniqueClicks: Int(uniqueClicks),
            uniqueOpens: Int(uniqueOpens), dismissals: Int(dismissals),
            channels: ChannelCounts(push: Int(push), local: Int(local), unknown: Int(unknownChannel)),
            platforms: PlatformCounts(ios: Int(ios), android: Int(android), unknown: Int(unknownPlatform)),
            revision: hitCount
        )
    }
}
