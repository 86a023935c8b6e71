import TrackingDomain

/// A (window, delivery): what a window's state is known by, in a changelog and when it is read
/// back.
public struct WindowKey: Sendable, Hashable {
    public var windowStart: Int64
    public var deliveryId: DeliveryID

    public init(windowStart: Int64, deliveryId: DeliveryID) {
        self.windowStart = windowStart
        self.deliveryId = deliveryId
    }
}
