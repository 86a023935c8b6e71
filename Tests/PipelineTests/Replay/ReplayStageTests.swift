import Foundation
import HitGenerator
import Kafka
import Testing
import TrackingDomain
import Windowing
@testable import Pipeline
@testable import RecordFormats
@testable import Runner

/// `replay`'s one window task over every partition, its shards on the lanes.
@Suite("replay stage")
struct ReplayStageTests {
    @Test("a replay's one task, its shards on three lanes, sends what it sends on one lane, record for record")
    func replayTaskOnTheLanes() throws {
        let arena = RecordArena()
        let hits = HitStream(HitStreamConfig(count: 8_000, seed: 5, deliveries: 60, span: 12 * 60_000, lateRate: 0.05)).generate()
        let partitions: Int32 = 4
        let records = hits.enumerated().map { index, hit in
            arena.record(
                partition: Int32(index) % partitions, offset: Int64(index) / Int64(partitions), key: hit.key, value: hit.value,
                timestamp: hit.kafkaTimestamp)
        }
        // Late hits arrive 30 s to 2 min after their time: past the 20 s retention, some are too late.
        // Batches as a consumer returns them: runs of one partition, several partitions each.
        let batches = stride(from: 0, to: records.count, by: 800).map { start in
            records[start..<min(records.count, start + 800)].sorted { ($0.partition, $0.offset) < ($1.partition, $1.offset) }
        }
        let start = hits.map(\.kafkaTimestamp).min()!
        for maxEntries in [20_000_000, 400] {
            let window = WindowConfig(size: 60_000, grace: 5_000, retention: 20_000, idleTimeout: 1 << 40, maxEntries: maxEntries)
            func replay(lanes: Int) throws -> (sent: [RecordingSink.Sent], capacityEvictions: Int) {
                var stage = ReplayStage(
                    sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000), window: window,
                    shards: lanes)
                try stage.assign((0..<partitions).map { PartitionStart(partition: $0) }, now: start)
                var sink = RecordingSink()
                var evictions = 0
                for (index, batch) in batches.enumerated() {
                    let now = start + Int64(index) * 1_000
                    try stage.process(Array(batch), now: now, into: &sink)
                    try stage.tick(now: now + 500, into: &sink)
                    evictions += stage.drainReport().capacityEvictions.count
                }
                try stage.finish(now: start + Int64(batches.count) * 1_000, into: &sink)
                return (sink.sent, evictions)
            }
            let one = try replay(lanes: 1)
            let three = try replay(lanes: 3)
            #expect(one.sent.filter { $0.destination == .output }.count > 300)
            #expect(one.sent.contains { $0.destination == .deadLetter && $0.header[DeadLetter.Header.reason] == "too_late" })
            if maxEntries < 10_000 { #expect(one.capacityEvictions > 0) }
            #expect(one.sent == three.sent)
            #expect(one.capacityEvictions == three.capacityEvictions)
        }
    }

    @Test("sends what it counts at once, with no changelog and no commit point; a time range keeps, of everything, the records of its windows and fewer dead letters")
    func sendsAtOnceWithinItsRange() throws {
        let arena = RecordArena()
        let hits = HitStream(HitStreamConfig(count: 3_000, seed: 9, deliveries: 30, span: 10 * 60_000, lateRate: 0.05)).generate()
        let records = hits.enumerated().map { index, hit in
            arena.record(partition: Int32(index % 2), offset: Int64(index / 2), key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
        }
        let batches = stride(from: 0, to: records.count, by: 500).map { Array(records[$0..<min(records.count, $0 + 500)]) }
        let start = hits.map(\.kafkaTimestamp).min()!
        let window = WindowConfig(size: 60_000, grace: 5_000, retention: 20_000, idleTimeout: 1 << 40)
        func replay(range: Range<Int64>) throws -> [RecordingSink.Sent] {
            var stage = ReplayStage(
                sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000), window: window,
                shards: 2, range: range)
            try stage.assign([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: start)
            var sink = RecordingSink()
            for (index, batch) in batches.enumerated() {
                try stage.process(batch, now: start + Int64(index) * 1_000, into: &sink)
            }
            // Nothing to commit, and no state to read back or hold windows for (a StatelessStage).
            #expect(stage.commitPoints().isEmpty)
            return sink.sent
        }
        // No tick, no finish, no commit: whatever went out, went out with its batch.
        let everything = try replay(range: Int64.min..<Int64.max)
        #expect(everything.filter { $0.destination == .output }.count > 100)
        #expect(everything.contains { $0.destination == .deadLetter && $0.header[DeadLetter.Header.reason] == "too_late" })
        #expect(!everything.contains { $0.destination == .changelog })

        let first = EventTimeMath.windowStart(of: start, size: window.lengths[0]) + 3 * window.lengths[0]
        let range = first..<(first + 3 * window.lengths[0])
        let starts = Set(stride(from: range.lowerBound, to: range.upperBound, by: Int(window.lengths[0])).map { RFC3339.format(epochMillis: $0) })
        let ranged = try replay(range: range)
        let inRange = everything.filter { $0.destination == .output && starts.contains(String($0.keyText!.split(separator: "@").last!)) }
        #expect(!inRange.isEmpty)
        #expect(ranged.filter { $0.destination == .output } == inRange)
        let letters = ranged.filter { $0.destination == .deadLetter }
        #expect(letters.count < everything.filter { $0.destination == .deadLetter }.count)
        #expect(letters.allSatisfy { letter in everything.contains(letter) })
    }

    @Test(
        "a time range's report says what it wrote (its windows' hits, the dead letters it sent) and what it read and left aside, and balances; in and out add up to a replay of everything"
    )
    func rangeReportMatchesWhatWasSent() throws {
        let arena = RecordArena()
        // Late hits, bad messages, hits of deliveries with tracking off over ten minutes, and hits a
        // day old at the end (too late, for a window outside any range here).
        let config = HitStreamConfig(
            count: 4_000, seed: 13, deliveries: 20, span: 10 * 60_000, lateRate: 0.05, badRate: 0.05, trackingOffEvery: 4, staleCount: 20)
        let hits = HitStream(config).generate()
        let records = hits.enumerated().map { index, hit in
            arena.record(partition: Int32(index % 2), offset: Int64(index / 2), key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
        }
        let batches = stride(from: 0, to: records.count, by: 500).map { Array(records[$0..<min(records.count, $0 + 500)]) }
        let start = config.start
        let window = WindowConfig(size: 60_000, grace: 5_000, retention: 20_000, idleTimeout: 1 << 40)
        func replay(range: Range<Int64>) throws -> (sent: RecordingSink, accounting: Accounting) {
            var stage = ReplayStage(
                sourceTopic: "hits", input: RawHitInput(limits: NormalizerLimits(), maxFutureSkew: 3_600_000), window: window,
                shards: 2, range: range)
            try stage.assign([PartitionStart(partition: 0), PartitionStart(partition: 1)], now: start)
            var sink = RecordingSink()
            var accounting = Accounting()
            for (index, batch) in batches.enumerated() {
                try stage.process(batch, now: start + Int64(index) * 1_000, into: &sink)
                accounting.add(stage.drainReport().accounting)
            }
            try stage.finish(now: start + Int64(batches.count) * 1_000, into: &sink)
            accounting.add(stage.drainReport().accounting)
            return (sink, accounting)
        }
        /// The hits in the windows written: each window's last record counts all of them.
        func hitsWritten(_ sink: RecordingSink) throws -> Int {
            var last: [String: Int] = [:]
            for record in sink.to(.output) {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(record.value ?? [])) as? [String: Any])
                last[record.keyText!] = try #require(object["revision"] as? Int)
            }
            return last.values.reduce(0, +)
        }
        func lettersByReason(_ sink: RecordingSink) -> ReasonCounts<RejectReason> {
            sink.to(.deadLetter).reduce(into: [:]) { letters, letter in
                if let reason = letter.header[DeadLetter.Header.reason].flatMap(RejectReason.init(rawValue:)) { letters[reason] += 1 }
            }
        }

        let everything = try replay(range: Int64.min..<Int64.max)
        let all = everything.accounting
        #expect(all.balanced && all.outsideRangeTotal == 0 && all.consumed == records.count)
        #expect(all.emitted == everything.sent.to(.output).count)
        #expect(all.deadLettered == lettersByReason(everything.sent))
        #expect(try hitsWritten(everything.sent) == all.accepted)

        let first = EventTimeMath.windowStart(of: start, size: window.lengths[0]) + 3 * window.lengths[0]
        let ranged = try replay(range: first..<(first + 3 * window.lengths[0]))
        let a = ranged.accounting
        #expect(a.balanced, "\(a)")
        #expect(a.consumed == records.count)
        #expect(a.emitted == ranged.sent.to(.output).count, "emitted is what went out")
        #expect(a.deadLettered == lettersByReason(ranged.sent), "dead-lettered is what went out, by reason")
        #expect(try hitsWritten(ranged.sent) == a.accepted, "accepted is the hits of the windows written")
        #expect(a.acceptedOutsideRange > 0 && a.deadLetteredOutsideRange.total > 0 && a.outsideRangeTotal < a.consumed)
        #expect(a.deadLetteredOutsideRange[.tooLate] > 0 || a.deadLettered[.tooLate] > 0)
        // Nothing is counted twice or lost between in and out.
        #expect(a.accepted + a.acceptedOutsideRange == all.accepted)
        var filtered = a.filtered, deadLettered = a.deadLettered
        filtered.add(a.filteredOutsideRange)
        deadLettered.add(a.deadLetteredOutsideRange)
        #expect(filtered == all.filtered)
        #expect(deadLettered == all.deadLettered)
        #expect(a.filteredTotal > 0 && a.filteredOutsideRange.total > 0, "tracking-off hits on both sides")
    }
}
