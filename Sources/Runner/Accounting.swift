import TrackingDomain

/// Where every consumed message went. The invariant the worker keeps and the tests check:
/// `consumed == accepted + filtered + deadLettered + duplicates + outsideRange`, always, per
/// stage (`outsideRange` only in a backfill of a time range).
public struct Accounting: Sendable, Equatable {
    public var consumed = 0
    /// Counted in a window (aggregate stage, including `rereadFinal`; in a backfill of a time
    /// range, a window of the range) or sent on to the repartition topic (normalize stage).
    public var accepted = 0
    /// Part of `accepted`: hits re-read after a restart whose window the previous run had finished.
    public var rereadFinal = 0
    public var filtered = ReasonCounts<FilterReason>()
    public var deadLettered = ReasonCounts<RejectReason>()
    /// Events a crashed upstream had already sent once, recognised by their source position
    /// and dropped (aggregate stage behind the repartition topic).
    public var duplicates = 0
    /// Part of `consumed`: messages below the previous owner's processed mark, read again to
    /// rebuild window state after a restart or a rebalance.
    public var reread = 0
    /// Watermark marks read from the repartition topic; not messages of the input, so outside
    /// the balance.
    public var marks = 0
    public var emitted = 0
    /// Records dropped because they belonged to a partition no longer assigned, or repeated an
    /// offset already processed (the consumer guard against librdkafka 2.0.x's stale deliveries).
    public var staleDropped = 0
    /// Times a partition's offsets jumped forward (compaction, transactions, retention, or a
    /// consumer bug): logged loudly.
    public var offsetGaps = 0
    /// Changelog records read back to restore window state (not messages of the input, so
    /// outside the balance).
    public var restored = 0
    /// Part of the `too_late` dead letters: hits that crossed the shuffle without their
    /// original message, dead-lettered as trackpipe normalized them (`OriginalRule`'s
    /// exceptions: the memory cap, or a record overtaken beyond the allowance).
    public var lateWithoutOriginal = 0
    /// Of several window sizes, hits too late for the windows of some and counted in another's
    /// (accepted: a hit too late for every size is a `too_late` dead letter), by the size (ms)
    /// they missed; a hit that missed two sizes counts in both. Not a fate of its own: what the
    /// smaller sizes' records lack.
    public var tooLateForSize: [Int64: Int] = [:]
    /// A backfill of a time range (`replay --from/--to`) reads more than its range (from a
    /// retention before it, to the end of the topic) and writes only what belongs to it: the
    /// messages about a window outside the range are read and left aside, counted here and in
    /// no other count. Hits counted in windows whose record is not written,
    public var acceptedOutsideRange = 0
    /// hits the tracking rule filtered, by reason,
    public var filteredOutsideRange = ReasonCounts<FilterReason>()
    /// and messages whose dead letter is not sent, by reason.
    public var deadLetteredOutsideRange = ReasonCounts<RejectReason>()

    public init() {}

    public var filteredTotal: Int { filtered.total }
    public var deadLetteredTotal: Int { deadLettered.total }
    /// Messages read and left aside because they lie outside a backfill's range.
    public var outsideRangeTotal: Int {
        acceptedOutsideRange + filteredOutsideRange.total + deadLetteredOutsideRange.total
    }
    public var balanced: Bool { consumed == accepted + filteredTotal + deadLetteredTotal + duplicates + outsideRangeTotal }

    /// Every integer counter, once: `add` and `subtracting` go through this list, so a new
    /// counter cannot be summed in one and forgotten in the other (a test checks that the
    /// list names every stored `Int`).
    static let counters: [WritableKeyPath<Accounting, Int> & Sendable] = [
        \.consumed, \.accepted, \.rereadFinal, \.duplicates, \.reread, \.marks, \.emitted, \.staleDropped, \.offsetGaps, \.restored,
        \.lateWithoutOriginal,
        \.acceptedOutsideRange,
    ]

    /// Every count by reason, once, for the same purpose.
    static let filteredByReason: [WritableKeyPath<Accounting, ReasonCounts<FilterReason>> & Sendable] = [\.filtered, \.filteredOutsideRange]
    static let deadLetteredByReason: [WritableKeyPath<Accounting, ReasonCounts<RejectReason>> & Sendable] = [
        \.deadLettered, \.deadLetteredOutsideRange,
    ]
    /// Every count by window size, once.
    static let bySize: [WritableKeyPath<Accounting, [Int64: Int]> & Sendable] = [\.tooLateForSize]

    public mutating func add(_ other: Accounting) {
        for counter in Self.counters { self[keyPath: counter] += other.field(counter) }
        for tally in Self.filteredByReason { self[keyPath: tally].add(other.field(tally)) }
        for tally in Self.deadLetteredByReason { self[keyPath: tally].add(other.field(tally)) }
        for tally in Self.bySize { self[keyPath: tally].merge(other.field(tally), uniquingKeysWith: +) }
    }

    /// The stored field at `path`, read in place: `self[keyPath:]` on a value copies the whole
    /// accounting (its arrays and dictionary retained and released) for each field it reads, and
    /// `add`, once per task of every batch, read seventeen (about 28 instructions a hit, one
    /// stage, callgrind). Every listed path is a stored property (a test holds the lists to the
    /// stored fields), so it has an offset.
    private func field<Value>(_ path: WritableKeyPath<Accounting, Value>) -> Value {
        withUnsafePointer(to: self) { $0.pointer(to: path)!.pointee }
    }

    /// What happened since `earlier`, a snapshot of the same running totals. A reason whose
    /// count did not grow counts 0.
    public func subtracting(_ earlier: Accounting) -> Accounting {
        var delta = self
        for counter in Self.counters { delta[keyPath: counter] -= earlier[keyPath: counter] }
        for tally in Self.filteredByReason { delta[keyPath: tally] = self[keyPath: tally].growth(since: earlier[keyPath: tally]) }
        for tally in Self.deadLetteredByReason { delta[keyPath: tally] = self[keyPath: tally].growth(since: earlier[keyPath: tally]) }
        for tally in Self.bySize {
            delta[keyPath: tally] = self[keyPath: tally].merging(earlier[keyPath: tally].mapValues { -$0 }, uniquingKeysWith: +).filter { $0.value > 0 }
        }
        return delta
    }
}
