/// Which window task a record belongs to.
public enum TaskKey: Sendable, Hashable, Comparable {
    /// The task of one partition of the stage's input: partitions hold disjoint deliveries, so
    /// its state moves alone on a rebalance and it commits its own checkpoint.
    case partition(Int32)
    /// The one task over every partition (`replay`): exact whatever the input's keys, for a
    /// single process that reads everything; it commits nothing.
    case global

    public static func < (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.partition(let x), .partition(let y)): x < y
        case (.partition, .global): true
        case (.global, _): false
        }
    }

    var partition: Int32? {
        if case .partition(let partition) = self { partition } else { nil }
    }
}
