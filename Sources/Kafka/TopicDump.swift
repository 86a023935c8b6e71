/// A copied-out record, for tools and tests that read a whole topic after the fact.
public struct StoredRecord: Sendable, Hashable {
    public var partition: Int32
    public var offset: Int64
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var headers: [KafkaHeader]
    public var timestamp: Int64?
}

extension KafkaConsumer {
    /// Reads every record of `topic` from the beginning to the end offsets of the moment of the
    /// call, without a group (nothing is committed). Needs `enable.partition.eof` off or on alike.
    public func readToEnd(topic: String, partitions: Int32, timeoutSeconds: Double = 60) throws -> [StoredRecord] {
        let all = (0..<partitions).map { TopicPartition(topic: topic, partition: $0) }
        var ends: [Int32: Int64] = [:]
        for end in try endOffsets(all) { ends[end.partition] = end.offset }
        var remaining = Set(all.filter { (ends[$0.partition] ?? 0) > 0 }.map(\.partition))
        guard !remaining.isEmpty else { return [] }
        try assign(all.map { TopicPartitionOffset($0, offset: KafkaOffset.beginning) })
        var records: [StoredRecord] = []
        let deadline = ContinuousClock.now + .milliseconds(Int(timeoutSeconds * 1000))
        while !remaining.isEmpty && ContinuousClock.now < deadline {
            poll(timeoutMilliseconds: 100) { event in
                guard case .record(let record) = event else { return }
                records.append(
                    StoredRecord(
                        partition: record.partition, offset: record.offset, key: record.key.map { Array($0) },
                        value: record.value.map { Array($0) }, headers: record.headers, timestamp: record.timestamp))
                if record.offset + 1 >= ends[record.partition] ?? 0 { remaining.remove(record.partition) }
            }
        }
        guard remaining.isEmpty else {
            throw KafkaError(.librdkafka(code: -185), "reading \(topic) to its end timed out; partitions left: \(remaining.sorted())")
        }
        return records
    }
}
