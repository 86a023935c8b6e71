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
}
