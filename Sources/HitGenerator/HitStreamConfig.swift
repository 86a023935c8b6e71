/// The knobs of a generated stream. Defaults give a realistic mix: every shape, SDK retry
/// duplicates, out-of-order and late arrivals, a few deliveries with tracking off, and about
/// one bad message in a hundred.
public struct HitStreamConfig: Sendable {
    /// Messages to generate (exactly).
    public var count: Int
    public var seed: UInt64
    /// Seed of the delivery ids when not `seed`: successive batches of one live stream differ
    /// in seed but must belong to the same deliveries, or every batch would be new campaigns.
    public var deliverySeed: UInt64?
    /// Recipients (broadlog ids) are numbered after this one, so that successive batches of one
    /// live stream do not reuse the same recipients.
    public var firstRecipient: UInt64
    /// Distinct deliveries (campaign sends) the hits belong to.
    public var deliveries: Int
    /// Event time of the first interaction (epoch ms).
    public var start: Int64
    /// Event time the interactions are spread over (ms).
    public var span: Int64
    /// Share of hits the SDK sends twice (queued retries).
    public var duplicateRate: Double
    /// Share of hits that arrive 30 s to 2 min after their event time (past the default grace).
    public var lateRate: Double
    /// Share of messages that are bad and must be dead-lettered.
    public var badRate: Double
    /// One delivery in this many has tracking off.
    public var trackingOffEvery: Int
    /// Hits a day older than the rest, sent last (they must come out as `too_late`).
    public var staleCount: Int

    public init(
        count: Int, seed: UInt64 = 1, deliveries: Int = 20, start: Int64 = 1_795_341_600_000,
        span: Int64 = 10 * 60_000, duplicateRate: Double = 0.05, lateRate: Double = 0.01, badRate: Double = 0.01,
        trackingOffEvery: Int = 8, staleCount: Int = 0, deliverySeed: UInt64? = nil, firstRecipient: UInt64 = 0
    ) {
        self.count = count
        self.seed = seed
        self.deliveries = max(1, deliveries)
        self.start = start
        self.span = max(1, span)
        self.duplicateRate = duplicateRate
        self.lateRate = lateRate
        self.badRate = badRate
        self.trackingOffEvery = max(1, trackingOffEvery)
        self.staleCount = staleCount
        self.deliverySeed = deliverySeed
        self.firstRecipient = firstRecipient
    }
}
