import TrackingDomain

/// State of one delivery in one window: which actions each broadlog has shown, plus running
/// counters, so an emission is O(1) and never rescans the broadlogs.
///
/// A broadlog costs one table entry (its id, inline for ids up to 15 UTF-8 bytes, and a
/// one-byte action mask), which keeps a retained entry well under 64 bytes.
struct DeliveryWindow: Sendable {
    static let clickBit: UInt8 = 1 << HitAction.click.rawValue
    static let openBit: UInt8 = 1 << HitAction.open.rawValue

    // In this order, so that the fields fill the words they share (96 bytes in all; a window
    // is stored per delivery, and most hold a few broadlogs).
    /// Action bitmask per broadlog; never zero for a present one. In a store that exports its
    /// changes, the broadlogs changed since the last export are flagged in it.
    var broadlogs = BroadlogSet()
    /// The revision of the last record emitted; 0 when none was.
    var emittedRevision: UInt32 = 0
    /// The input position (`WindowInput.position`) of the last hit counted, kept only by stores
    /// that export their changes for a changelog: a restored window skips reread hits it already holds.
    var countedThrough: Int64 = .min
    var counters = WindowCounters()
    /// Changed since the last emission (only tracked once the window has been emitted).
    var dirty = false
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
        broadlogId: BroadlogID, action: HitAction, channel: Channel, platform: Platform, trackDirty: Bool, position: Int64 = 0,
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
        let old = broadlogs.merge(broadlogId, bit, tracking: exportsChanges)
        let isNewForAction = old & bit == 0
        switch action {
        case .impression:
            counters.impressions &+= 1
            if isNewForAction { counters.uniqueImpressions &+= 1 }
        case .click:
            counters.clicks &+= 1
            if isNewForAction { counters.uniqueClicks &+= 1 }
        case .open:
            counters.opens &+= 1
            if isNewForAction { counters.uniqueOpens &+= 1 }
        }
        if isNewForAction {
            let was = Self.isDismissal(old)
            let now = Self.isDismissal(old | bit)
            if was != now {
                if now { counters.dismissals &+= 1 } else { counters.dismissals &-= 1 }
            }
        }
        switch channel {
        case .push: counters.push &+= 1
        case .local: counters.local &+= 1
        case .unknown: counters.unknownChannel &+= 1
        }
        switch platform {
        case .ios: counters.ios &+= 1
        case .android: counters.android &+= 1
        case .unknown: counters.unknownPlatform &+= 1
        }
        var becameDirty = false
        if trackDirty && !dirty {
            dirty = true
            becameDirty = true
        }
        return Change(newEntry: old == 0, becameDirty: becameDirty, becameStateChanged: becameStateChanged)
    }

    // MARK: State

    /// The whole state, every broadlog included.
    func state(of key: WindowKey) -> WindowState {
        var list: [BroadlogActions] = []
        list.reserveCapacity(broadlogs.count)
        broadlogs.forEach { list.append(BroadlogActions(id: $0, actions: $1)) }
        return WindowState(
            size: key.size, deliveryId: key.deliveryId, windowStart: key.windowStart, counters: counters, broadlogs: list, countedThrough: countedThrough,
            emittedRevision: emittedRevision)
    }

    /// What changed since the changes were last cleared: the broadlogs flagged, with the
    /// counters and marks as they are now. Reads only; `clearChanges` forgets them.
    func change(of key: WindowKey) -> WindowChange {
        var list: [BroadlogActions] = []
        // Grown by appends, the list was reallocated about five times a window (40 instructions
        // a hit, one stage, callgrind).
        list.reserveCapacity(broadlogs.changedBound)
        broadlogs.forEachChanged { list.append(BroadlogActions(id: $0, actions: $1)) }
        return WindowChange(
            window: key, counters: counters, countedThrough: countedThrough,
            emittedRevision: emittedRevision, broadlogs: list, broadlogCount: broadlogs.count)
    }

    /// The changes were handed out.
    mutating func clearChanges() {
        stateChanged = false
        broadlogs.clearChanges()
    }

    /// The window a state describes; nothing of it is flagged changed.
    init(_ state: WindowState) {
        counters = state.counters
        broadlogs = BroadlogSet(minimumCapacity: state.broadlogCount)
        for entry in state.broadlogs where entry.actions != 0 { _ = broadlogs.merge(entry.id, entry.actions) }
        countedThrough = state.countedThrough
        emittedRevision = state.emittedRevision
    }

    init() {}

    /// Hits counted so far: the record's revision. It grows with every correction (each one
    /// adds at least a hit) and is the same whoever rebuilds the window from the same input,
    /// so it never goes backwards across restarts, rebalances or instances.
    var hitCount: Int { counters.hitCount }

    func aggregate(deliveryId: DeliveryID, start: Int64, end: Int64) -> WindowAggregate {
        WindowAggregate(
            deliveryId: deliveryId, windowStart: start, windowEnd: end,
            impressions: Int(counters.impressions), clicks: Int(counters.clicks), opens: Int(counters.opens),
            uniqueImpressions: Int(counters.uniqueImpressions), uniqueClicks: Int(counters.uniqueClicks),
            uniqueOpens: Int(counters.uniqueOpens), dismissals: Int(counters.dismissals),
            channels: ChannelCounts(push: Int(counters.push), local: Int(counters.local), unknown: Int(counters.unknownChannel)),
            platforms: PlatformCounts(ios: Int(counters.ios), android: Int(counters.android), unknown: Int(counters.unknownPlatform)),
            revision: hitCount
        )
    }
}
