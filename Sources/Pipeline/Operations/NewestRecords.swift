import Runner
import Foundation
import Kafka
import Logging

/// The newest record of each partition of a topic that a check recognises, stepping back from
/// the partition's end over the records it does not (tombstones, another program's records),
/// at most `bound` offsets: what the start-up checks read of the topics trackpipe writes into
/// (the window size an output topic holds, the group that writes an internal topic). The end of
/// a partition is what a compacted topic, or a sink keeping the latest record per key, keeps;
/// reading a whole topic at every start would not scale.
///
/// It steps back in rounds, 1, then 9, then 90 offsets (a partition whose newest record is
/// recognised costs one record, as before), each round with a consumer of its own, so that an
/// end-of-partition event of one round is never taken for the next round's.
enum NewestRecords {
    /// How many offsets back from each partition's end a check looks, at most: a hundred records
    /// at most per partition, one in the usual case.
    static let bound: Int64 = 100

    /// How long a read waits for a record before the cluster is taken for unreachable.
    static let roundTimeoutSeconds: Double = 10

    /// What was stepped over in one partition.
    struct Skipped: Sendable, Equatable {
        var tombstones = 0
        var others = 0
    }

    /// What one partition holds at its end.
    enum Found<Value> {
        /// The newest record recognised, at `offset`.
        case recognised(Value, offset: Int64)
        /// No record recognised down to the partition's log start (or it is empty): nothing
        /// there is of the kind the check looks for.
        case absent
        /// `bound` offsets stepped back without one, and older records remain: cannot be told.
        case undecided(Skipped)
    }

    /// Per partition of `topic` (of `partitions` partitions), what stepping back found.
    /// `recognise` is given every record read, newest ones included, and returns what the check
    /// needs of one it recognises.
    /// `logs`: each partition's log start and end, as `logs(of:)` gives them; nil: asked here.
    static func find<Value>(
        in topic: String, partitions: Int, logs: [Int32: Range<Int64>]? = nil, reader: TopicReader, bound: Int64 = bound,
        recognise: (PolledRecord) -> Value?
    ) throws -> [Int32: Found<Value>] {
        let logs = try logs ?? Self.logs(of: topic, partitions: partitions, reader: reader)
        var found: [Int32: Found<Value>] = [:]
        // Per partition still open: its log start, the end of what is not read yet, and what was stepped over.
        var open: [Int32: (low: Int64, next: Int64, skipped: Skipped)] = [:]
        for partition in 0..<Int32(partitions) {
            let log = logs[partition] ?? 0..<0
            if log.isEmpty { found[partition] = Found<Value>.absent } else { open[partition] = (log.lowerBound, log.upperBound, Skipped()) }
        }
        var reached: Int64 = 0
        for step in [Int64(1), 9, 90] where !open.isEmpty && reached < bound {
            let length = min(step, bound - reached)
            reached += length
            let ranges = open.mapValues { max($0.low, $0.next - length)..<$0.next }
            let round = try read(topic: topic, ranges: ranges, reader: reader, recognise: recognise)
            for (partition, range) in ranges {
                if let newest = round.newest[partition] {
                    found[partition] = .recognised(newest.value, offset: newest.offset)
                    open[partition] = nil
                    continue
                }
                guard var state = open[partition] else { continue }  // every range is of an open partition
                state.next = range.lowerBound
                state.skipped.tombstones += round.skipped[partition]?.tombstones ?? 0
                state.skipped.others += round.skipped[partition]?.others ?? 0
                if state.next <= state.low {
                    found[partition] = Found<Value>.absent
                    open[partition] = nil
                } else {
                    open[partition] = state
                }
            }
        }
        for (partition, state) in open { found[partition] = .undecided(state.skipped) }
        return found
    }

    /// Each partition's log start and end (the offset the next record gets): two requests for
    /// all partitions, not one per partition, asked through the reader's consumer.
    static func logs(of topic: String, partitions: Int, reader: TopicReader) throws -> [Int32: Range<Int64>] {
        let all = (0..<Int32(partitions)).map { TopicPartition(topic: topic, partition: $0) }
        let reader = try reader.consumer()
        var lows: [Int32: Int64] = [:]
        for offset in try reader.beginningOffsets(all) { lows[offset.partition] = max(0, offset.offset) }
        var logs: [Int32: Range<Int64>] = [:]
        for offset in try reader.endOffsets(all) {
            let low = lows[offset.partition] ?? 0
            logs[offset.partition] = low..<max(low, offset.offset)
        }
        return logs
    }

    /// Reads each partition's range once, with a consumer of its own (of the reader's settings),
    /// made only where there is a range to read; `recognise` is given every record read, and the
    /// newest it recognises in each range is returned. The cluster is taken for unreachable when
    /// `roundTimeoutSeconds` pass without a record.
    static func read<Value>(
        topic: String, ranges: [Int32: Range<Int64>], reader settings: TopicReader, recognise: (PolledRecord) -> Value?
    ) throws -> (newest: [Int32: (value: Value, offset: Int64)], skipped: [Int32: Skipped]) {
        guard !ranges.isEmpty else { return ([:], [:]) }
        let reader = try settings.newConsumer()
        defer { reader.close() }
        try reader.assign(ranges.map { TopicPartitionOffset(topic: topic, partition: $0.key, offset: $0.value.lowerBound) })
        var reading = Set(ranges.keys)
        var newest: [Int32: (value: Value, offset: Int64)] = [:]
        var skipped: [Int32: Skipped] = [:]
        var failure: KafkaError?
        var deadline = Date().addingTimeInterval(roundTimeoutSeconds)
        while !reading.isEmpty {
            if let failure, failure.severity == .fatal { throw PipelineError.kafka("reading \(topic) back: \(failure)") }
            guard Date() < deadline else {
                throw PipelineError.clusterUnreachable(
                    "reading \(topic) back: partitions \(reading.sorted()) did not answer within \(Int(roundTimeoutSeconds)) s\(failure.map { " (\($0))" } ?? "")")
            }
            _ = reader.pollBatch(timeoutMilliseconds: 200) { batch in
                for index in 0..<batch.count {
                    switch batch.event(at: index) {
                    case .record(let record):
                        deadline = Date().addingTimeInterval(roundTimeoutSeconds)
                        let partition = record.partition
                        guard reading.contains(partition), let range = ranges[partition] else { continue }
                        // Past the range: what an earlier round read, or what arrived since.
                        guard record.offset < range.upperBound else {
                            reading.remove(partition)
                            continue
                        }
                        guard record.offset >= range.lowerBound else { continue }
                        if let value = recognise(record) {
                            if (newest[partition]?.offset ?? .min) < record.offset { newest[partition] = (value, record.offset) }
                        } else if record.value == nil {
                            skipped[partition, default: Skipped()].tombstones += 1
                        } else {
                            skipped[partition, default: Skipped()].others += 1
                        }
                        if record.offset == range.upperBound - 1 { reading.remove(partition) }
                    case .partitionEOF(let partition, _):
                        // The range's last offsets hold nothing to deliver (transaction markers).
                        if partition.topic == topic { reading.remove(partition.partition) }
                    case .error(let error):
                        failure = error
                    }
                }
            }
        }
        return (newest, skipped)
    }
}
