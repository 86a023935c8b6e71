import TrackingDomain

/// A hit the engine refused because its window had already been finalised and dropped.
///
/// It is handed back rather than swallowed so the pipeline can dead-letter it as `too_late`
/// with its source position: nothing is lost silently.
public struct LateHit: Sendable, Hashable {
    public var event: TrackingEvent
    public var partition: Int32
    public var offset: Int64
    /// Human-readable: the window, the watermark and eviction horizon at the time, and why.
    public var detail: String

    public init(event: TrackingEvent, partition: Int32, offset: Int64, detail: String) {
        self.event = event
        self.partition = partition
        self.offset = offset
        self.detail = detail
    }
}
