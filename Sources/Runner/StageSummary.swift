import Kafka

/// What one stage did in a run, for the exit summary and for tests.
public struct StageSummary: Sendable {
    public var stage: String
    public var topic: String
    public var accounting: Accounting
    public var elapsedMilliseconds: Int64
    public var committed: [TopicPartitionOffset]
    public var timeline = RunnerTimeline()
    /// Times the input was paused because the output was behind, and the most bytes that
    /// waited for acknowledgement at once.
    public var pauses = 0
    public var largestBacklog = 0
    /// Offsets of the stage's input that were never delivered (the consumer guard's jumps),
    /// in the order they were seen: lost input where the log start had passed them, otherwise
    /// transaction markers or records compaction removed.
    public var offsetGaps: [InputSpan] = []
    /// Input deleted before the group read it, in the order found: what a bounded run lost.
    public var lostInput: [InputSpan] = []
    /// The stage's gauges as it stopped: the windows it still held unwritten, among them.
    public var gaugesAtEnd = StageGauges()
}
