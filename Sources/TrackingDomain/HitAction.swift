/// What the user did with a notification. Raw values are stable so the windowing engine
/// can index per-action counters without hashing.
public enum HitAction: UInt8, Sendable, Hashable, CaseIterable {
    /// Delivered and shown, not touched (`action` "7").
    case impression = 0
    /// Touched: opened or dismissed (`action` "2"). A click without an open is a dismissal.
    case click = 1
    /// Tapped and the app opened (`action` "1"); always preceded by a click.
    case open = 2

    /// The name used in normalized events and aggregates.
    public var name: String { Self.names[Int(rawValue)] }
    private static let names = ["impression", "click", "open"]

    /// The `action` code hits carry (docs/tracking-hits.md): 7, 2 or 1.
    public var code: Int { [7, 2, 1][Int(rawValue)] }
}
