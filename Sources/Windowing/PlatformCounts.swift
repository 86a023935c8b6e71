import TrackingDomain

/// Hits of one window split by platform: iOS impressions are unreliable (the app is not woken
/// when closed), so consumers must be able to see where a count came from.
public struct PlatformCounts: Sendable, Hashable {
    public var ios: Int
    public var android: Int
    public var unknown: Int

    public init(ios: Int = 0, android: Int = 0, unknown: Int = 0) {
        self.ios = ios
        self.android = android
        self.unknown = unknown
    }

    public subscript(platform: Platform) -> Int {
        get {
            switch platform {
            case .ios: ios
            case .android: android
            case .unknown: unknown
            }
        }
        set {
            switch platform {
            case .ios: ios = newValue
            case .android: android = newValue
            case .unknown: unknown = newValue
            }
        }
    }
}
