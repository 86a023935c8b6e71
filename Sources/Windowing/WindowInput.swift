import TrackingDomain

/// One normalized hit together with where it was read from.
///
/// The source position travels with the hit so the engine can tell the pipeline which offsets
/// are safe to commit and can recognise replayed hits after a restart.
public struct WindowInput: Sendable, Hashable {
    public var event: TrackingEvent
    public var partition: Int32
    public var offset: Int64
    /// The caller's own number for this hit, handed back with it if it is too late: several
    /// hits can share one offset (events batched in one record), and the caller needs to know
    /// which one to dead-letter.
    public var tag: Int

    public init(event: TrackingEvent, partition: Int32, offset: Int64, tag: Int = 0) {
        self.event = event
        self.partition = partition
        self.offset = offset
        self.tag = tag
    }
}
