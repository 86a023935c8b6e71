/// What one source partition says about its event time: the highest event time it has
/// delivered, and whether it has gone quiet.
///
/// Behind a shuffle (the repartition topic) the records of one source partition reach many
/// downstream partitions, and most of them see few or none of its records. The marks travel
/// with the records and on their own, as Flink carries watermarks across a network shuffle, so
/// that every downstream task can take the minimum over all sources instead of trusting the
/// sources it happens to hear from (Kafka Streams' stream time, the maximum seen, lets one
/// fast partition make everyone else's hits late).
public struct SourceMark: Sendable, Hashable {
    public var source: Int32
    /// Highest event time the source has delivered; nil while it has delivered none.
    public var watermark: Int64?
    /// The source's reader has seen nothing on it for the idle timeout: it stops holding the
    /// watermark back until it delivers again.
    public var idle: Bool
    /// The source delivered (or reported itself active) in the batch these marks close, even if
    /// its last report says it has gone idle since: that is input arriving, for the watermark's
    /// "every source idle" rule.
    public var delivered: Bool
    /// For an idle source, when it last delivered, as its reader's clock had it (nil: not
    /// said): where the "every source idle" rule counts the quiet from, so that whoever reads
    /// the marks (a new owner included) counts it from the same moment.
    public var quietSince: Int64?

    public init(source: Int32, watermark: Int64?, idle: Bool = false, delivered: Bool? = nil, quietSince: Int64? = nil) {
        self.source = source
        self.watermark = watermark
        self.idle = idle
        self.delivered = delivered ?? !idle
        self.quietSince = quietSince
    }
}

/// The marks of one batch, one per source: the latest watermark each source reported in it, and
/// whether its last report said it was idle. The engine takes them at the end of the batch.
/// Generic over how sources are named, so that a caller that tells sources apart by more than a
/// partition number (a topic's incarnation, say) keeps its own names until it maps them.
///
/// Every event reports its source, and events come in runs of one source: the run in progress
/// is kept aside and folded into the table when another source reports, so that a run costs
/// one hash lookup rather than two per event. Inlinable, so that callers in other modules get
/// it specialized for their source type (unspecialized, each call looked up generic metadata).
public struct SourceMarks<Source: Hashable & Sendable>: Sendable {
    @usableFromInline var table: [Source: Report] = [:]
    /// The source that reported last, and what it has reported since it took over from another.
    @usableFromInline var run: (source: Source, report: Report)?

    public struct Report: Sendable, Equatable {
        public var watermark: Int64?
        /// The source's last report in the batch.
        public var idle: Bool
        /// Any report in the batch was not idle (the source delivered).
        public var delivered: Bool
        /// The latest moment an idle report said the source last delivered.
        public var quietSince: Int64?

        @inlinable
        public init(watermark: Int64?, idle: Bool, delivered: Bool, quietSince: Int64? = nil) {
            self.watermark = watermark
            self.idle = idle
            self.delivered = delivered
            self.quietSince = quietSince
        }
    }

    @inlinable
    public init() {}

    /// A source reported its watermark (nil: none yet) and whether it is idle (and if so, since
    /// when it has been quiet, if it says).
    @inlinable
    public mutating func note(source: Source, watermark: Int64?, idle: Bool = false, delivered: Bool? = nil, quietSince: Int64? = nil) {
        let report = Report(watermark: watermark, idle: idle, delivered: delivered ?? !idle, quietSince: quietSince)
        if let current = run, current.source == source {
            run = (source, Self.folded(report, after: current.report))
            return
        }
        if let previous = run { Self.fold(previous, into: &table) }
        run = (source, report)
    }

    /// Each source's report: the latest watermark over all its reports, and its last idleness.
    @inlinable
    public func forEachSource(_ body: (Source, Report) throws -> Void) rethrows {
        guard let run else { return try table.forEach(body) }
        for (source, report) in table where source != run.source { try body(source, report) }
        try body(run.source, Self.folded(run.report, after: table[run.source]))
    }

    /// Reports of a run, after whatever the table holds for its source.
    @inlinable
    static func fold(_ run: (source: Source, report: Report), into table: inout [Source: Report]) {
        table[run.source] = folded(run.report, after: table[run.source])
    }

    /// A source's report after its `earlier` one: the latest watermark and quiet time of the two,
    /// the later idleness, delivered if either delivered.
    @inlinable
    static func folded(_ report: Report, after earlier: Report?) -> Report {
        Report(
            watermark: EventTimeMath.latest(earlier?.watermark, report.watermark), idle: report.idle,
            delivered: (earlier?.delivered ?? false) || report.delivered,
            quietSince: EventTimeMath.latest(earlier?.quietSince, report.quietSince))
    }

    public mutating func merge(_ other: SourceMarks) {
        other.forEachSource { source, report in
            note(source: source, watermark: report.watermark, idle: report.idle, delivered: report.delivered, quietSince: report.quietSince)
        }
    }
}
