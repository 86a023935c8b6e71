/// Everything one (delivery, window) holds, as a value a changelog can carry: its counters, the
/// actions of each broadlog, how far into its input it has counted, and what was last emitted
/// for it. Restoring these values rebuilds the window exactly.
public struct WindowState: Sendable, Equatable {
    public var deliveryId: String
    public var windowStart: Int64
    /// The hit counters, in `WindowState.counterNames` order.
    public var counters: [UInt32]
    /// Each broadlog with the bitmask of the actions it showed (bit `HitAction.rawValue`).
    public var broadlogs: [BroadlogActions]
    /// The input position (`WindowInput.position`) of the last hit counted: a replayed hit at or
    /// below it is already in.
    public var countedThrough: Int64
    /// The revision (hit count) of the last record emitted for the window; 0 when none was.
    public var emittedRevision: UInt32

    public struct BroadlogActions: Sendable, Equatable {
        public var id: String
        public var actions: UInt8

        public init(id: String, actions: UInt8) {
            self.id = id
            self.actions = actions
        }
    }

    public static let counterNames = [
        "impressions", "clicks", "opens", "uniqueImpressions", "uniqueClicks", "uniqueOpens", "dismissals",
        "push", "local", "unknownChannel", "ios", "android", "unknownPlatform",
    ]

    public init(
        deliveryId: String, windowStart: Int64, counters: [UInt32], broadlogs: [BroadlogActions], countedThrough: Int64,
        emittedRevision: UInt32
    ) {
        self.deliveryId = deliveryId
        self.windowStart = windowStart
        self.counters = counters
        self.broadlogs = broadlogs
        self.countedThrough = countedThrough
        self.emittedRevision = emittedRevision
    }

    /// The window this state belongs to.
    public var key: WindowKey { WindowKey(windowStart: windowStart, deliveryId: deliveryId) }

    /// The record this state stands for (nil if its counters are malformed): what a new owner
    /// sends again for a window whose last emission may have been lost.
    public func record(windowSize: Int64) -> WindowAggregate? {
        DeliveryWindow(self)?.aggregate(deliveryId: deliveryId, start: windowStart, end: EventTimeMath.add(windowStart, windowSize))
    }

    /// Hits counted: the revision its record carries.
    public var revision: Int { counters.count >= 3 ? Int(counters[0]) + Int(counters[1]) + Int(counters[2]) : 0 }
}

/// What changed in a store's state since it was last asked: windows to write again (among them
/// the final state of windows evicted since), and windows gone (evicted) whose records must be
/// deleted once their last records are out.
public struct StateChanges: Sendable {
    public var windows: [WindowState] = []
    /// Evicted windows.
    public var evicted: [WindowKey] = []

    public init() {}

    public var isEmpty: Bool { windows.isEmpty && evicted.isEmpty }
}
