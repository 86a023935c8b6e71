import TrackingDomain

/// A dimension hits are counted by in an aggregate: `Channel` (push and local notifications are
/// reported apart in Campaign) and `Platform` (iOS impressions are unreliable, since a closed
/// app is not woken, so consumers must see where a count came from).
///
/// Each has exactly three cases with raw values 0, 1 and 2: the raw value is where its count is
/// kept, which is what lets one small value type serve both without a dictionary per aggregate.
public protocol CountedCategory: RawRepresentable<UInt8>, CaseIterable, Hashable, Sendable {
    /// The name used in output (`push`, `ios`, …).
    var name: String { get }
}

extension Channel: CountedCategory {}
extension Platform: CountedCategory {}

/// Hits of one window split by a category. One generic type instead of a hand-written struct
/// per dimension, so that the two cannot drift apart; `ChannelCounts` and `PlatformCounts`
/// keep their names and initializers.
public struct CategoryCounts<Category: CountedCategory>: Sendable, Hashable {
    private var slot0 = 0
    private var slot1 = 0
    private var slot2 = 0

    public subscript(category: Category) -> Int {
        get {
            switch category.rawValue {
            case 0: slot0
            case 1: slot1
            default: slot2
            }
        }
        set {
            switch category.rawValue {
            case 0: slot0 = newValue
            case 1: slot1 = newValue
            default: slot2 = newValue
            }
        }
    }
}

extension CategoryCounts: CustomStringConvertible {
    public var description: String {
        "[" + Category.allCases.map { "\($0.name): \(self[$0])" }.joined(separator: ", ") + "]"
    }
}

public typealias ChannelCounts = CategoryCounts<Channel>
public typealias PlatformCounts = CategoryCounts<Platform>

extension CategoryCounts where Category == Channel {
    public init(push: Int = 0, local: Int = 0, unknown: Int = 0) { self.init(slot0: push, slot1: local, slot2: unknown) }
}

extension CategoryCounts where Category == Platform {
    public init(ios: Int = 0, android: Int = 0, unknown: Int = 0) { self.init(slot0: ios, slot1: android, slot2: unknown) }
}
