import TrackingDomain

/// A (window, delivery): what a window's state is known by, in a changelog and when it is read
/// back. The size is part of it: the hour from 10:00 and the minute from 10:00 are two windows.
public struct WindowKey: Sendable, Hashable {
    /// The window's length (ms).
    public var size: Int64
    public var windowStart: Int64
    public var deliveryId: DeliveryID

    public init(size: Int64, windowStart: Int64, deliveryId: DeliveryID) {
        self.size = size
        self.windowStart = windowStart
        self.deliveryId = deliveryId
    }

    /// Epoch milliseconds, exclusive.
    public var windowEnd: Int64 { EventTimeMath.add(windowStart, size) }
}
