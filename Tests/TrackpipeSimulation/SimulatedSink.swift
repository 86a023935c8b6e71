import Kafka
import Pipeline

/// A stage's way out in the simulation: every send lands in its topic at once, as if the
/// producer had it acknowledged before the call returned. A send to a destination the stage
/// has no topic for, or to a partition the topic does not have, is an error the checks report.
struct SimulatedSink: RecordSink {
    let topics: [Destination: TopicLog]
    let stamp: WriteStamp
    /// Per state partition, the offset after the last record written (every send is
    /// acknowledged at once): what the runner hands `completeCommit`.
    private(set) var changelogEnds: [Int32: Int64] = [:]

    init(topics: [Destination: TopicLog], stamp: WriteStamp) {
        self.topics = topics
        self.stamp = stamp
    }

    mutating func send(
        _ destination: Destination, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader], timestamp: Int64?
    ) throws {
        guard let log = topics[destination] else {
            throw SimulationError("sent a record to \(destination), which this stage writes no topic for")
        }
        // The output and dead-letter topics have one partition: the order of all records is the
        // order per key that a compacted topic or a last-value reader would see.
        let target = partition ?? 0
        guard target >= 0, Int(target) < log.partitionCount else {
            throw SimulationError("sent a record to partition \(target) of \(log.name), which has \(log.partitionCount)")
        }
        let offset = log.append(partition: target, key: key, value: value, timestamp: timestamp, headers: headers, stamp: stamp)
        if destination == .changelog { changelogEnds[target] = max(changelogEnds[target] ?? 0, offset + 1) }
    }
}

/// Something the simulation itself refused: a stage doing what no runner allows.
struct SimulationError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
