import TrackingDomain

/// One broadlog of a window with the bitmask of the actions it showed (bit `HitAction.rawValue`),
/// never zero.
public struct BroadlogActions: Sendable, Equatable {
    public var id: BroadlogID
    public var actions: UInt8

    public init(id: BroadlogID, actions: UInt8) {
        self.id = id
        self.actions = actions
    }
}

/// Everything one (delivery, window) holds, as a value a changelog can give back: its counters,
/// the actions of each broadlog, how far into its input it has counted, and what was last
/// emitted for it. Restoring these values rebuilds the window exactly.
public struct WindowState: Sendable, Equatable {
    /// The window's length (ms).
    public var size: Int64
    public var deliveryId: DeliveryID
    public var windowStart: Int64
    public var counters: WindowCounters
    /// Every broadlog with its actions. One named more than once (a list gathered from a
    /// changelog's segments) has the union of its actions.
    public var broadlogs: [BroadlogActions]
    /// How many distinct broadlogs `broadlogs` holds: what a window put back is sized for.
    public var broadlogCount: Int
    /// The input position (`WindowInput.position`) of the last hit counted: a reread hit at or
    /// below it is already in.
    public var countedThrough: Int64
    /// The revision (hit count) of the last record emitted for the window; 0 when none was.
    public var emittedRevision: UInt32

    public init(
        size: Int64, deliveryId: DeliveryID, windowStart: Int64, counters: WindowCounters, broadlogs: [BroadlogActions],
        broadlogCount: Int? = nil, countedThrough: Int64, emittedRevision: UInt32
    ) {
        self.size = size
        self.deliveryId = deliveryId
        self.windowStart = windowStart
        self.counters = counters
        self.broadlogs = broadlogs
        self.broadlogCount = broadlogCount ?? broadlogs.count
        self.countedThrough = countedThrough
        self.emittedRevision = emittedRevision
    }

    /// The window this state belongs to.
    public var key: WindowKey { WindowKey(size: size, windowStart: windowStart, deliveryId: deliveryId) }

    /// The record this state stands for: what a new owner sends again for a window whose last
    /// emission may have been lost.
    public var record: WindowAggregate {
        DeliveryWindow(self).aggregate(deliveryId: deliveryId, start: windowStart, end: key.windowEnd)
    }
}

/// What changed in one (delivery, window) since its state was last handed out: its counters, how
/// far it has counted and what it last emitted, as they are now, and only the broadlogs that are
/// new or showed a new action since (each with all its actions). A changelog that keeps every
/// change of a window since its last complete write holds the window: the union of their
/// broadlogs, with the latest change's counters.
public struct WindowChange: Sendable, Equatable {
    public var window: WindowKey
    public var counters: WindowCounters
    public var countedThrough: Int64
    public var emittedRevision: UInt32
    /// Broadlogs added, or whose actions grew, since the last hand-out, with all their actions.
    public var broadlogs: [BroadlogActions]
    /// How many broadlogs the window holds in all (what a complete write of it would carry).
    public var broadlogCount: Int

    public init(
        window: WindowKey, counters: WindowCounters, countedThrough: Int64, emittedRevision: UInt32, broadlogs: [BroadlogActions],
        broadlogCount: Int
    ) {
        self.window = window
        self.counters = counters
        self.countedThrough = countedThrough
        self.emittedRevision = emittedRevision
        self.broadlogs = broadlogs
        self.broadlogCount = broadlogCount
    }
}

/// What changed in an engine's state since it was last asked: the windows that changed (among
/// them the final change of windows evicted since), and the windows gone (evicted), whose
/// records must be deleted once their last records are out.
public struct StateChanges: Sendable {
    public var windows: [WindowChange] = []
    /// Evicted windows.
    public var evicted: [WindowKey] = []

    public init() {}

    public var isEmpty: Bool { windows.isEmpty && evicted.isEmpty }
}
