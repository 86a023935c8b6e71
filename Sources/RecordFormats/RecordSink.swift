/// Where a stage's records go, named by role rather than by topic: the runner maps roles to
/// the topics it was configured with.
public enum Destination: Sendable, Hashable, CaseIterable {
    /// Aggregate records (the output topic).
    case output
    /// Accepted events keyed by delivery, and watermark marks (the internal repartition topic).
    case repartition
    /// Messages that could not be counted, with the reason in headers.
    case deadLetter
    /// The state of the window tasks, one partition per task (the compacted state topic).
    case changelog
}

/// The way out of a stage. The runner's sink hands records to a Kafka producer; tests use a
/// sink that keeps copies, which is what lets a stage be tested without Kafka.
///
/// A record's bytes need to live only for the call: a sink copies what it keeps.
public protocol RecordSink {
    mutating func send(_ record: some OutgoingRecord) throws
}
