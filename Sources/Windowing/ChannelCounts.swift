import TrackingDomain

/// Hits of one window split by channel, so push and local notifications can be told apart in
/// reports without a second aggregation.
public struct ChannelCounts: Sendable, Hashable {
    public var push: Int
    public var local: Int
    public var unknown: Int

    public init(push: Int = 0, local: Int = 0, unknown: Int = 0) {
        self.push = push
        self.local = local
        self.unknown = unknown
    }

    public subscript(channel: Channel) -> Int {
        get {
            switch channel {
            case .push: push
            case .local: local
            case .unknown: unknown
            }
        }
        set {
            switch channel {
            case .push: push = newValue
            case .local: local = newValue
            case .unknown: unknown = newValue
            }
        }
    }
}
