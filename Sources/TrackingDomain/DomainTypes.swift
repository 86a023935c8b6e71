// Stand-in for the real TrackingDomain types so the windowing branch compiles on its own.
// The lead drops this file at merge; the real module declares identical names.

public enum HitAction: UInt8, Sendable, Hashable, CaseIterable { case impression = 0, click = 1, open = 2 }
public enum Channel: UInt8, Sendable, Hashable, CaseIterable { case push = 0, local = 1, unknown = 2 }
public enum Platform: UInt8, Sendable, Hashable, CaseIterable { case ios = 0, android = 1, unknown = 2 }
public enum HitShape: UInt8, Sendable, Hashable, CaseIterable { case sdkContextData, trackActionEnvelope, iosPush, androidPush, androidLocal, iosLocal, postbackURL }
public struct TrackingEvent: Sendable, Hashable {
    public var deliveryId: String; public var broadlogId: String; public var action: HitAction
    public var channel: Channel; public var platform: Platform; public var eventTime: Int64?; public var shape: HitShape
    public init(deliveryId: String, broadlogId: String, action: HitAction, channel: Channel, platform: Platform, eventTime: Int64?, shape: HitShape) {
        self.deliveryId = deliveryId; self.broadlogId = broadlogId; self.action = action
        self.channel = channel; self.platform = platform; self.eventTime = eventTime; self.shape = shape
    }
}
