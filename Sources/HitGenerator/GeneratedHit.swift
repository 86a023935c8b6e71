import TrackingDomain

/// One message of a generated stream, with what it *means*: the generator knows the truth
/// independently of the normalizer, which is what lets tests check the pipeline against it.
public struct GeneratedHit: Sendable {
    public var key: [UInt8]?
    public var value: [UInt8]
    /// The Kafka record timestamp to produce it with (epoch ms): the moment the hit was received.
    public var kafkaTimestamp: Int64
    public var truth: Truth

    public enum Truth: Sendable, Equatable {
        /// A valid, tracked hit that must be counted.
        case counted(Expected)
        /// A valid hit of a delivery whose tracking flag is off.
        case trackingOff
        /// A bad message and the reason it must be dead-lettered with.
        case rejected(RejectReason)
        /// A valid hit far older than the rest of the stream (a device that was offline for a
        /// day): past any window's retention once the stream has moved on.
        case stale(Expected)
    }

    /// What a counted hit contributes, as the spec derives it from the shape.
    public struct Expected: Sendable, Hashable {
        public var deliveryId: String
        public var broadlogId: String
        public var action: HitAction
        public var channel: Channel
        public var platform: Platform
        public var eventTime: Int64
    }
}
