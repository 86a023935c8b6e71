import Kafka

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
/// The buffers need to live only for the call: a sink copies what it keeps.
public protocol RecordSink {
    /// - Parameters:
    ///   - partition: nil lets the producer choose by key.
    ///   - timestamp: epoch ms; nil lets the producer stamp the current time.
    mutating func send(
        _ destination: Destination, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader], timestamp: Int64?
    ) throws
}
