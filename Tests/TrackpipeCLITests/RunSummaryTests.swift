import Foundation
import HitGenerator
import Kafka
import Pipeline
import RecordFormats
import Testing
import TrackpipeTestSupport

/// `run --until-end`'s summary is what a backfill Job's log keeps: each count it gives of what
/// was written must be what the topics received, in either mode.
@Suite("trackpipe run: the summary says what the topics received", .serialized)
struct RunSummaryTests {
    /// Bad messages, late hits, tracking-off deliveries, SDK retries, and hits a day old at the
    /// end (too late): dead letters of both stages.
    static func corpus(keyedByDelivery: Bool) -> Corpus {
        let hits = HitStream(HitStreamConfig(count: 6_000, seed: 83, deliveries: 8, span: 20 * 60_000, lateRate: 0.03, badRate: 0.03, staleCount: 25))
            .generate()
        guard keyedByDelivery else { return Corpus(hits) }
        // As a producer keyed by delivery sends them; a message with no delivery to key it by
        // keeps the device's key.
        return Corpus(
            hits.map { hit in
                var keyed = hit
                switch hit.truth {
                case .counted(let expected), .stale(let expected): keyed.key = Array(expected.deliveryId.utf8)
                default: break
                }
                return keyed
            })
    }

    @Test(
        "run --until-end, two stages and one (--input-keyed-by-delivery): each stage's dead letters by reason are what the dead-letter topic received, the records emitted what the output topic received, the hits counted what the windows hold",
        arguments: [false, true])
    func summaryMatchesTopics(keyedByDelivery: Bool) throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 6)
        for topic in ["out", "dlq", "sum-repartition", "sum-state"] { try broker.createTopic(topic, partitions: keyedByDelivery ? 6 : 4) }
        let corpus = Self.corpus(keyedByDelivery: keyedByDelivery)
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let run = try TrackpipeBinary.locate().run(
            [
                "run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "out", "--dlq-topic", "dlq",
                "--group", "sum", "--log-level", "warning", "-X", "session.timeout.ms=6000",
            ] + (keyedByDelivery ? ["--input-keyed-by-delivery"] : []))
        #expect(run.exitCode == 0, "\(run.stderr.suffix(2_000))")
        let summary = try SummaryReading(run.stdout)
        let partitions: Int32 = keyedByDelivery ? 6 : 4
        let topics = try TopicContents(broker: broker, output: "out", outputPartitions: partitions, dlq: "dlq", dlqPartitions: partitions)
        summary.expectMatches(topics)
        #expect(summary.stages.count == (keyedByDelivery ? 1 : 2), "\(run.stdout)")
        #expect(summary.stages.first?.consumed == corpus.hits.count)
        #expect(summary.deadLettered["malformed_json"] != nil, "\(summary.deadLettered)")
        // The hits a day old at the end: whether each is too late depends on what the window
        // task had read before it. One stage judges a batch against the event time reached before
        // it, so a partition read in one batch counts its old hits; behind the shuffle, a source
        // heard from before any of its hits had a time holds a task's event time back
        // (docs/windowing.md). Each is either counted or a too_late letter, never both, never
        // neither, and the summary says how many letters (`expectMatches` above).
        let tooLate = Set(
            topics.deadLetters.filter { DeadLetter(headers: $0.headers)?.reason == .tooLate }.compactMap(\.value))
        let stale = corpus.hits.filter { if case .stale = $0.truth { true } else { false } }
        let staleCounted = stale.compactMap { hit -> GeneratedHit.Expected? in
            guard case .stale(let expected) = hit.truth, !tooLate.contains(hit.value) else { return nil }
            return expected
        }
        #expect(summary.deadLettered["too_late", default: 0] == stale.count - staleCounted.count, "\(summary.deadLettered)")
        if !keyedByDelivery {
            // What the normalize stage sent on is what the aggregate stage read.
            #expect(summary.stages[0].accepted == summary.stages[1].consumed, "\(run.stdout)")
        }
        let counted = corpus.hits.compactMap { hit -> GeneratedHit.Expected? in if case .counted(let expected) = hit.truth { expected } else { nil } }
        #expect(topics.mismatches(against: ReferenceAggregates(counted + staleCounted, windowSize: 60_000)).isEmpty)
    }
}
