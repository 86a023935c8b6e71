/// A window of the state read back, by its start and delivery.
public struct RestoredWindow: Sendable, Hashable {
    public var windowStart: Int64
    public var deliveryId: String

    public init(windowStart: Int64, deliveryId: String) {
        self.windowStart = windowStart
        self.deliveryId = deliveryId
    }
}
