/// Where every consumed message went. The invariant the worker keeps and the tests check:
/// `consumed == accepted + filtered + deadLettered`, always.
public struct Accounting: Sendable, Equatable {
    public var consumed = 0
    /// Counted in a window, including replayed hits that were already final (`replayedFinal`).
    public var accepted = 0
    /// Part of `accepted`: hits re-read after a restart whose window the previous run had finished.
    public var replayedFinal = 0
    public var filtered: [String: Int] = [:]
    public var deadLettered: [String: Int] = [:]
    public var emitted = 0

    public init() {}

    public var filteredTotal: Int { filtered.values.reduce(0, +) }
    public var deadLetteredTotal: Int { deadLettered.values.reduce(0, +) }
    public var balanced: Bool { consumed == accepted + filteredTotal + deadLetteredTotal }

    public mutating func add(_ other: Accounting) {
        consumed += other.consumed
        accepted += other.accepted
        replayedFinal += other.replayedFinal
        emitted += other.emitted
        filtered.merge(other.filtered, uniquingKeysWith: +)
        deadLettered.merge(other.deadLettered, uniquingKeysWith: +)
    }
}
