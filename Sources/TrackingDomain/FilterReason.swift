/// Why a well-formed hit was dropped on purpose. Filtered hits are counted, not dead-lettered:
/// they are correct input that Campaign says must not be tracked.
public enum FilterReason: String, Sendable, Hashable, CaseIterable {
    /// `_acsDeliveryTracking` is present and not `"on"` (ignoring ASCII case).
    case trackingOff = "tracking_off"
}
