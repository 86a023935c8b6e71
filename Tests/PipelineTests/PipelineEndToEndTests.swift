import Foundation
import HitGenerator
import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
import Windowing

@Suite("Pipeline end to end on the embedded broker", .serialized)
struct PipelineEndToEndTests {
    static let minute: Int64 = 60_000

    func makeBroker(inputPartitions: Int = 16) throws -> EmbeddedBroker {
        try TestTopics.broker(inputPartitions: inputPartitions)
    }

    func config(_ broker: EmbeddedBroker, group: String, shards: Int = 2) -> PipelineConfig {
        var config = TestTopics.config(broker, group: group, window: WindowConfig(size: Self.minute), shards: shards)
        config.untilEnd = true
        return config
    }

    func contents(_ broker: EmbeddedBroker) throws -> TopicContents { try TestTopics.contents(broker) }

    @Test("tens of thousands of hits in every shape: the last record per key equals the independent reference; dead letters match by reason, bytes unchanged")
    func generatedCorpus() throws {
        let broker = try makeBroker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 30_000, seed: 11, deliveries: 10, span: 30 * Self.minute)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)

        let summary = try Pipeline(config: config(broker, group: "e2e")).run()
        let out = try contents(broker)

        let problems = out.mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        #expect(out.lastByKey.count > 100)

        // Accounting: every message is accepted, filtered or dead-lettered, and the numbers match the truth.
        let a = summary.accounting
        let truth = corpus.hits.map(\.truth)
        #expect(a.consumed == 30_000)
        #expect(a.balanced)
        #expect(a.accepted == truth.filter { if case .counted = $0 { true } else { false } }.count)
        #expect(a.filtered[.trackingOff] == truth.filter { $0 == .trackingOff }.count)

        // Each bad message is dead-lettered exactly once, with its reason, key and value unchanged.
        let bad = corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }
        #expect(out.deadLetters.count == bad.count)
        var seen = Set<String>()
        for letter in out.deadLetters {
            guard let context = DeadLetter(headers: letter.headers) else {
                Issue.record("a dead letter lacks its trackpipe.* headers")
                continue
            }
            #expect(seen.insert("\(context.sourcePartition)@\(context.sourceOffset)").inserted, "dead-lettered twice")
            #expect(context.sourceTopic == "hits")
            guard let hit = corpus.hit(partition: context.sourcePartition, offset: context.sourceOffset) else {
                Issue.record("a dead letter points at no produced message")
                continue
            }
            #expect(hit.truth == .rejected(context.reason), "\(String(decoding: hit.value, as: UTF8.self))")
            #expect(letter.value == hit.value)
            #expect(letter.key == hit.key)
            #expect(!context.detail.isEmpty)
        }
        #expect(Set(out.deadLetters.compactMap { DeadLetter(headers: $0.headers)?.reason }).count == 9)
    }

    @Test("a second run over a grown topic reads the windows back from the state topic and goes on from the commit: never doubled, nothing re-read, stale hits are too_late, no dead letter is sent twice")
    func restartRereadsExactly() throws {
        let broker = try makeBroker()
        // Two hours of event time: the first hour's windows are evicted during the first run.
        let corpus = Corpus(
            HitStream(HitStreamConfig(count: 24_000, seed: 5, deliveries: 6, span: 120 * Self.minute, staleCount: 4)).generate())
        let firstPhase = 0..<14_000
        try corpus.produce(firstPhase, to: "hits", on: broker)
        let first = try Pipeline(config: config(broker, group: "replay", shards: 1)).run()
        #expect(first.accounting.balanced)
        #expect(first.committed.contains { $0.offset > 0 })
        let afterFirst = try contents(broker)
        #expect(afterFirst.mismatches(against: corpus.expected(windowSize: Self.minute, in: firstPhase)).isEmpty)

        try corpus.produce(firstPhase.upperBound..<corpus.hits.count, to: "hits", on: broker)
        let second = try Pipeline(config: config(broker, group: "replay", shards: 3)).run()
        // Each stage balances; the aggregate stage read its windows back and re-read no event.
        #expect(second.stages.allSatisfy { $0.accounting.balanced })
        #expect(second.stages.last!.accounting.reread == 0)
        #expect(second.stages.last!.accounting.restored > 0, "the state was read back")
        let out = try contents(broker)
        let problems = out.mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")

        let reasons = out.deadLetters.compactMap { DeadLetter(headers: $0.headers) }
        let tooLate = out.deadLetters.compactMap { record in DeadLetter(headers: record.headers).map { (record, $0) } }
            .filter { $0.1.reason == .tooLate }
        #expect(tooLate.count == 4)
        for (record, letter) in tooLate {
            let hit = corpus.hit(partition: letter.sourcePartition, offset: letter.sourceOffset)
            #expect(hit.map { if case .stale = $0.truth { true } else { false } } == true)
            // The stale hits arrived with their own old time, so they crossed the shuffle without
            // their original bytes: the dead letter read them back from the input topic.
            #expect(record.value == hit?.value, "the dead letter of \(letter.sourcePartition)@\(letter.sourceOffset) is not the message as it arrived")
            #expect(record.timestamp == hit?.kafkaTimestamp)
        }
        let bad = corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }.count
        #expect(reasons.count == bad + 4, "every bad message dead-lettered exactly once across both runs")
    }

    @Test("records with more Kafka headers than the limit are dead-lettered as too_many_headers, read through the real consumer; records with a few or none are counted")
    func tooManyHeaders() throws {
        let broker = try makeBroker(inputPartitions: 2)
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let time: Int64 = 1_795_300_000_000
        for index in 0..<12 {
            let count = [0, 3, 65][index % 3]
            try producer.send(
                topic: "hits", partition: Int32(index % 2), key: nil,
                value: Array(#"{"deliveryId":"d1","broadlogId":"b\#(index)","action":"7","timestamp":\#(time)}"#.utf8),
                headers: (0..<count).map { KafkaHeader(key: "h\($0)", string: "x") }, timestamp: time)
        }
        try producer.flush(timeoutMilliseconds: 300_000)
        let summary = try Pipeline(config: config(broker, group: "headers")).run()
        let normalize = summary.stages[0].accounting
        #expect(normalize.deadLettered == [.tooManyHeaders: 4])
        #expect(normalize.accepted == 8)
        let letters = try contents(broker).deadLetters.compactMap { DeadLetter(headers: $0.headers) }
        #expect(letters.map(\.reason) == Array(repeating: .tooManyHeaders, count: 4))
    }

    @Test("results do not depend on the shard count")
    func shardCountDoesNotMatter() throws {
        var results: [[String: ReferenceAggregates.Counts]] = []
        for shards in [1, 4] {
            let broker = try makeBroker(inputPartitions: 4)
            let corpus = Corpus(HitStream(HitStreamConfig(count: 6_000, seed: 3, deliveries: 7)).generate())
            try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
            _ = try Pipeline(config: config(broker, group: "shards-\(shards)", shards: shards)).run()
            results.append(try contents(broker).lastByKey.mapValues { ReferenceAggregates.counts(fromJSON: $0) })
        }
        #expect(results[0] == results[1])
        #expect(!results[0].isEmpty)
    }

    @Test("a hit stamped far in the future is dead-lettered as future_timestamp and does not make the others too late")
    func futureTimestamp() throws {
        let broker = try makeBroker(inputPartitions: 1)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 8, deliveries: 3, badRate: 0)).generate())
        try corpus.produce(0..<1_000, to: "hits", on: broker)
        // A device whose clock is a year ahead, received now-ish (Kafka timestamp = the stream's time).
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3"]))
        let received = corpus.hits[999].kafkaTimestamp
        let future = received + 365 * 86_400_000
        try producer.send(
            topic: "hits", key: nil,
            value: Array("{\"deliveryId\":\"dfuture\",\"broadlogId\":\"h1\",\"action\":\"7\",\"timestamp\":\(future)}".utf8),
            timestamp: received)
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
        try corpus.produce(1_000..<2_000, to: "hits", on: broker)

        let summary = try Pipeline(config: config(broker, group: "future")).run()
        #expect(summary.accounting.deadLettered == [.futureTimestamp: 1])
        let out = try contents(broker)
        #expect(out.mismatches(against: corpus.expected(windowSize: Self.minute)).isEmpty)
        let letter = try #require(out.deadLetters.first.flatMap { DeadLetter(headers: $0.headers) })
        #expect(letter.detail.contains("clock"))
    }

    @Test("the Prometheus metrics add up to the run's accounting, every reason visible from zero")
    func metricsMatchAccounting() throws {
        let broker = try makeBroker(inputPartitions: 2)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 4, deliveries: 8)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let metrics = PipelineMetrics()
        let summary = try Pipeline(config: config(broker, group: "metrics"), metrics: metrics).run()
        let text = metrics.registry.emitToString()
        for stage in summary.stages {
            let a = stage.accounting
            let label = "stage=\"\(stage.stage)\""
            #expect(text.contains("trackpipe_messages_consumed_total{\(label)} \(a.consumed)\n"), "\(stage.stage)")
            #expect(text.contains("trackpipe_hits_accepted_total{\(label)} \(a.accepted)\n"), "\(stage.stage)")
            for (reason, count) in a.deadLettered.counted {
                #expect(text.contains("trackpipe_dead_letters_total{\(label),reason=\"\(reason.rawValue)\"} \(count)\n"), "\(reason)")
            }
            #expect(text.contains("trackpipe_duplicates_dropped_total{\(label)} 0\n"))
        }
        let normalize = summary.stages[0].accounting, aggregate = summary.stages[1].accounting
        #expect(text.contains("trackpipe_hits_filtered_total{stage=\"normalize\",reason=\"tracking_off\"} \(normalize.filtered[.trackingOff])\n"))
        #expect(text.contains("trackpipe_aggregates_emitted_total{stage=\"aggregate\"} \(aggregate.emitted)\n"))
        #expect(text.contains("trackpipe_dead_letters_total{stage=\"aggregate\",reason=\"too_late\"} 0\n"))
        #expect(text.contains("trackpipe_dead_letters_total{stage=\"normalize\",reason=\"future_timestamp\"} 0\n"))
        #expect(aggregate.consumed == normalize.accepted, "every routed event reached the aggregate stage once")
        // The generated windows end after the wall clock of this run (a bounded run flushes
        // them early): the delay from a window's end to its emission is never negative.
        let sum = text.split(separator: "\n").first { $0.hasPrefix("trackpipe_emit_delay_seconds_sum") }
        #expect(sum.flatMap { Double($0.split(separator: " ").last!) }.map { $0 >= 0 } == true, "\(String(describing: sum))")
    }

    @Test("a missing input topic stops --until-end with an error that names it")
    func missingTopic() throws {
        let broker = try makeBroker()
        broker.setTopicError("no-such-topic", code: KafkaErrorCode.unknownTopicOrPartition)
        var settings = config(broker, group: "missing")
        settings.inputTopic = "no-such-topic"
        #expect(throws: PipelineError.inputTopicMissing("no-such-topic")) { try Pipeline(config: settings).run() }
    }

    @Test("settings that would break the guarantees are refused with the reason")
    func refusedSettings() {
        var settings = PipelineConfig()
        settings.kafkaProperties = ["enable.auto.commit": "true"]
        #expect(throws: PipelineError.self) { try settings.validate() }
        settings.kafkaProperties = [:]
        settings.outputTopics = [settings.inputTopic]
        #expect(throws: PipelineError.self) { try settings.validate() }
        settings = PipelineConfig()
        settings.repartitionTopic = settings.outputTopics[0]
        #expect(throws: PipelineError.self) { try settings.validate() }
        settings.inputKeyedByDelivery = true
        #expect(throws: Never.self) { try settings.validate() }
        // The duplicate filter needs the order the idempotent producer keeps.
        for value in ["false", "FALSE", "0", "f"] {
            settings.kafkaProperties = ["enable.idempotence": value]
            do {
                try settings.validate()
                Issue.record("enable.idempotence=\(value) accepted")
            } catch {
                #expect("\(error)".contains("-X enable.idempotence=\(value): the aggregate stage recognises events sent twice"))
            }
        }
        settings.kafkaProperties = ["enable.idempotence": "true"]
        #expect(throws: Never.self) { try settings.validate() }
    }
}
