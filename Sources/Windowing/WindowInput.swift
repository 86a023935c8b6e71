import TrackingDomain

/// One normalized hit together with where it was read from.
///
/// The source position travels with the hit so the engine can tell the pipeline which offsets
/// are safe to commit and can recognise replayed hits after a restart.
public struct WindowInput: Sendable, Hashable {
    public var event: TrackingEvent
    public var partition: Int32
    public var offset: Int64

    public init(event: TrackingEvent, partition: Int32, offset: Int64) {
        self.event = event
        self.partition = partition
        self.offset = offset
    }
}
