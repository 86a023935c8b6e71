import TrackingDomain

/// A reason things are counted by: its cases are the columns of a `ReasonCounts`, its raw value
/// the code every summary, log line and metric label shows.
public protocol CountedReason: Hashable, RawRepresentable, Sendable where RawValue == String {
    /// Every case once, stored.
    static var table: [Self] { get }
}

extension FilterReason: CountedReason { public static let table = allCases }
extension RejectReason: CountedReason { public static let table = allCases }

/// Counts by reason, in a fixed table indexed by the reason's case: a count is never keyed by a
/// spelling, so a reason that does not exist cannot be counted or looked up, and the code a
/// metric or a summary shows is the reason's own raw value, written once in its enum.
public struct ReasonCounts<Reason: CountedReason>: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    /// One count per case, in the order of `Reason.table`; empty until the first count, so
    /// that an accounting that saw none allocates nothing.
    private var counts: [Int] = []

    public init() {}

    public init(dictionaryLiteral elements: (Reason, Int)...) {
        for (reason, count) in elements { self[reason] += count }
    }

    public subscript(reason: Reason) -> Int {
        get { counts.isEmpty ? 0 : counts[Self.index(reason)] }
        set {
            if counts.isEmpty { counts = Array(repeating: 0, count: Reason.table.count) }
            counts[Self.index(reason)] = newValue
        }
    }

    public var total: Int { counts.reduce(0, +) }

    /// The reasons counted (count above zero), ordered by their code, as summaries list them.
    public var counted: [(reason: Reason, count: Int)] {
        zip(Reason.table, counts.isEmpty ? Array(repeating: 0, count: Reason.table.count) : counts)
            .filter { $0.1 > 0 }.sorted { $0.0.rawValue < $1.0.rawValue }.map { (reason: $0.0, count: $0.1) }
    }

    /// Column by column: both tables are in the order of `Reason.table` (or empty), so no reason
    /// is looked up (`index`, a scan of the table, for each count).
    public mutating func add(_ other: ReasonCounts) {
        guard !other.counts.isEmpty else { return }
        guard !counts.isEmpty else {
            counts = other.counts
            return
        }
        for index in counts.indices { counts[index] += other.counts[index] }
    }

    /// What grew since `earlier`; a reason that did not grow counts 0.
    func growth(since earlier: ReasonCounts) -> ReasonCounts {
        var delta = ReasonCounts()
        for reason in Reason.table where self[reason] > earlier[reason] { delta[reason] = self[reason] - earlier[reason] }
        return delta
    }

    public static func == (lhs: ReasonCounts, rhs: ReasonCounts) -> Bool {
        Reason.table.allSatisfy { lhs[$0] == rhs[$0] }
    }

    private static func index(_ reason: Reason) -> Int {
        // The cases are few (17 at most): a scan of a stored array's enum tags, no string
        // compared and nothing allocated (`allCases` would make its array at every call).
        Reason.table.firstIndex(of: reason)!
    }
}

extension ReasonCounts: CustomStringConvertible {
    /// `reason count, …` by code, as the summary and the progress line write it.
    public var description: String { counted.map { "\($0.reason.rawValue) \($0.count)" }.joined(separator: ", ") }
}
