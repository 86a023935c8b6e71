/// How the notification reached the device. Kept on every event because push and local
/// notifications are reported separately in Campaign.
public enum Channel: UInt8, Sendable, Hashable, CaseIterable {
    case push = 0
    case local = 1
    /// The hit named neither a channel nor carried a payload that implies one.
    case unknown = 2

    public var name: String { Self.names[Int(rawValue)] }
    private static let names = ["push", "local", "unknown"]
}
