/// The one normalized form of a hit (docs/tracking-hits.md, section 3): everything downstream — windowing,
/// aggregates, dead letters — sees only this, whatever shape the app sent.
public struct TrackingEvent: Sendable, Hashable {
    /// The delivery (campaign send) the hit counts towards; the aggregation key.
    public var deliveryId: DeliveryID
    /// The per-recipient message; unique counts are distinct broadlog ids.
    public var broadlogId: BroadlogID
    public var action: HitAction
    public var channel: Channel
    public var platform: Platform
    /// Epoch milliseconds. `nil` only when the hit carried no timestamp and there was no
    /// Kafka timestamp to fall back on (e.g. normalizing a file).
    public var eventTime: Int64?
    public var shape: HitShape

    public init(
        deliveryId: DeliveryID, broadlogId: BroadlogID, action: HitAction, channel: Channel,
        platform: Platform, eventTime: Int64?, shape: HitShape
    ) {
        self.deliveryId = deliveryId
        self.broadlogId = broadlogId
        self.action = action
        self.channel = channel
        self.platform = platform
        self.eventTime = eventTime
        self.shape = shape
    }
}

extension TrackingEvent {
    /// Writes the event as one JSON object, the form used by `trackpipe normalize` and
    /// described by `schemas/tracking-event.schema.json`.
    public func writeJSON(into writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("deliveryId"); writer.string(deliveryId)
        writer.key("broadlogId"); writer.string(broadlogId)
        writer.key("action"); writer.string(action.name)
        writer.key("channel"); writer.string(channel.name)
        writer.key("platform"); writer.string(platform.name)
        writer.key("eventTime")
        if let eventTime { writer.int(eventTime) } else { writer.null() }
        writer.key("shape"); writer.string(shape.name)
        writer.endObject()
    }
}
