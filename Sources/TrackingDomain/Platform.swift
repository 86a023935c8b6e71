/// The device platform. Kept on every event because iOS impressions are unreliable
/// (a closed app is not woken), so readers must be able to tell where a count came from.
public enum Platform: UInt8, Sendable, Hashable, CaseIterable {
    case ios = 0
    case android = 1
    /// The hit named no platform and its payload implies none.
    case unknown = 2

    public var name: String { Self.names[Int(rawValue)] }
    private static let names = ["ios", "android", "unknown"]
}
