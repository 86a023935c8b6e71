import TrackingDomain

/// One normalized hit together with where it was read from.
///
/// The source position travels with the hit so the engine can tell the pipeline which offsets
/// are safe to commit and can recognise reread hits after a restart.
public struct WindowInput: Sendable, Hashable {
    public var event: TrackingEvent
    public var partition: Int32
    public var offset: Int64
    /// The caller's own number for this hit, handed back with it if it is too late: several
    /// hits can share one offset (events batched in one record), and the caller needs to know
    /// which one to dead-letter.
    public var tag: Int
    /// Where the hit sits in its task's input, finer than `offset` (several hits can share one
    /// record): increasing in input order. A store that tracks state remembers the position of
    /// each window's last hit, so that a restored window skips reread hits it already holds.
    public var position: Int64

    public init(event: TrackingEvent, partition: Int32, offset: Int64, tag: Int = 0, position: Int64? = nil) {
        self.event = event
        self.partition = partition
        self.offset = offset
        self.tag = tag
        self.position = position ?? offset
    }
}
