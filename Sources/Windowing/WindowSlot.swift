import TrackingDomain

/// All deliveries of one window start held by one store.
struct WindowSlot: Sendable {
    let start: Int64
    let end: Int64
    /// Each delivery's window, keyed so that a lookup does not go through SipHash (`DeliveryKey`).
    var deliveries: [DeliveryKey: DeliveryWindow] = [:]
    var entries = 0
    /// The first emission of this window has happened (watermark passed end + grace, or a
    /// flush); from then on changes are re-emitted as corrections.
    var emitted = false
    /// Deliveries changed since the last emission, each listed once.
    var dirtyIds: [DeliveryID] = []
    /// Deliveries whose state changed since it was last handed out for the changelog, each
    /// listed once (kept only by stores that export their changes).
    var stateChangedIds: [DeliveryID] = []
}
