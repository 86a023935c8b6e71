import Foundation
import HitGenerator
import Kafka
import Synchronization

/// A generated stream loaded into an embedded broker, remembering where each message landed
/// so that every dead letter can be traced back to the generator's truth.
public final class Corpus: Sendable {
    public let hits: [GeneratedHit]
    private let positions = Mutex<[String: Int]>([:])

    public init(_ hits: [GeneratedHit]) { self.hits = hits }

    /// Produces `hits[range]` to `topic` and records their (partition, offset).
    public func produce(_ range: Range<Int>, to topic: String, on broker: EmbeddedBroker) throws {
        let producer = try KafkaProducer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "linger.ms": "5", "log_level": "3"])
        ) { [self] report in
            guard report.error == nil else { return }
            self.positions.withLock { $0["\(report.partition)@\(report.offset)"] = Int(report.token) }
        }
        for index in range {
            let hit = hits[index]
            try producer.send(topic: topic, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp, token: UInt64(index))
        }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
        let delivered = positions.withLock { $0.count }
        if delivered < range.upperBound { throw CorpusError("only \(delivered) of \(range.upperBound) messages were acknowledged") }
    }

    /// The generated hit at a source position, for dead-letter checks.
    public func hit(partition: Int32, offset: Int64) -> GeneratedHit? {
        positions.withLock { $0["\(partition)@\(offset)"] }.map { hits[$0] }
    }

    public func expected(windowSize: Int64, in range: Range<Int>? = nil) -> ReferenceAggregates {
        let slice = range.map { Array(hits[$0]) } ?? hits
        return ReferenceAggregates(
            slice.compactMap { if case .counted(let expected) = $0.truth { expected } else { nil } }, windowSize: windowSize)
    }
}

/// What the output and dead-letter topics hold after a run.
public struct TopicContents {
    public var lastByKey: [String: [String: Any]] = [:]
    /// Per key, the record with the highest revision (the first of equals): what a sink that
    /// upserts on revision keeps.
    public var highestByKey: [String: [String: Any]] = [:]
    public var revisions: [String: [Int]] = [:]
    public var deadLetters: [StoredRecord] = []
    public var outputRecords = 0

    public init(broker: EmbeddedBroker, output: String, outputPartitions: Int32, dlq: String, dlqPartitions: Int32) throws {
        let reader = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "reader-\(UUID())", "log_level": "3"]))
        let records = try reader.readToEnd(topic: output, partitions: outputPartitions, timeoutSeconds: SafetyDeadline.seconds)
        try self.init(
            output: records.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }).map { ($0.key, $0.value) },
            deadLetters: try reader.readToEnd(topic: dlq, partitions: dlqPartitions, timeoutSeconds: SafetyDeadline.seconds))
    }

    /// From records already read: the output's (key, value) in partition and offset order.
    public init(output: [(key: [UInt8]?, value: [UInt8]?)], deadLetters: [StoredRecord] = []) throws {
        outputRecords = output.count
        for record in output {
            guard let key = record.key.map({ String(decoding: $0, as: UTF8.self) }), let value = record.value,
                let object = try JSONSerialization.jsonObject(with: Data(value)) as? [String: Any]
            else { throw CorpusError("an output record is not a keyed JSON object") }
            lastByKey[key] = object
            let revision = object["revision"] as? Int ?? -1
            if revision > (highestByKey[key]?["revision"] as? Int ?? -2) { highestByKey[key] = object }
            revisions[key, default: []].append(revision)
        }
        self.deadLetters = deadLetters
    }

    /// Keys whose last record differs from the reference, with both sides, for a failure message.
    public func mismatches(against reference: ReferenceAggregates, highestRevision: Bool = false) -> [String] {
        let records = highestRevision ? highestByKey : lastByKey
        var problems: [String] = []
        for (key, expected) in reference.byKey {
            guard let object = records[key] else {
                problems.append("\(key): no output record, expected \(expected)")
                continue
            }
            let got = ReferenceAggregates.counts(fromJSON: object)
            if got != expected { problems.append("\(key): got \(got), expected \(expected)") }
        }
        for key in records.keys where reference.byKey[key] == nil { problems.append("\(key): unexpected output record") }
        return problems.sorted()
    }
}

public struct CorpusError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
