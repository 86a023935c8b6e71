import Foundation
import HitGenerator
import Kafka
import Logging
@testable import Pipeline
@testable import RecordFormats
@testable import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
import Windowing

/// Many instances, any input keys: the repartition stage makes counts exact whoever owns what.
@Suite("Scale-out on the embedded broker", .serialized)
struct ScaleOutTests {
    static let window: Int64 = 10_000

    func makeBroker() throws -> EmbeddedBroker { try TestTopics.broker() }

    func config(_ broker: EmbeddedBroker, group: String, untilEnd: Bool = false) -> PipelineConfig {
        var config = TestTopics.config(
            broker, group: group, window: WindowConfig(size: Self.window, grace: 1_000, retention: 3_600_000, idleTimeout: 1_500))
        config.untilEnd = untilEnd
        config.commitInterval = 300
        return config
    }

    func contents(_ broker: EmbeddedBroker) throws -> TopicContents { try TestTopics.contents(broker) }

    /// Produces hits to explicit partitions (index modulo the partition count, or `partition`).
    func produce(_ corpus: Corpus, _ range: Range<Int>, on broker: EmbeddedBroker, partitions: Int32 = 8, only: Int32? = nil, except: Int32? = nil) throws {
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "linger.ms": "5", "log_level": "3"]))
        for index in range {
            let partition = Int32(index) % partitions
            if let only, partition != only { continue }
            if let except, partition == except { continue }
            let hit = corpus.hits[index]
            try producer.send(topic: "hits", partition: partition, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
        }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
    }

    func badCount(_ corpus: Corpus) -> Int {
        corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }.count
    }

    @Test("the normalize stage crashed after sending but before committing: the re-sent events are dropped by source position (counted in the metrics), counts exact, no too_late")
    func resentEventsAreDropped() throws {
        let broker = try makeBroker()
        try broker.createTopic("resend-repartition", partitions: 4)
        try broker.createTopic("resend-state", partitions: 4)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 6_000, seed: 31, deliveries: 6)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let settings = config(broker, group: "resend", untilEnd: true)

        // 1. The normalize stage reads everything and its records are acknowledged, but it dies
        //    before committing: a runner of the input's partitions outside the group, which
        //    commits nothing.
        let everything = (0..<Int32(8)).map { TopicPartitionOffset(topic: "hits", partition: $0, offset: KafkaOffset.beginning) }
        var first = RunnerSettings(
            topic: "hits", assignment: .fixed(everything), bound: .endAtAssignment,
            consumer: settings.consumerConfig(group: "resend"), producer: settings.producerConfig,
            destinations: [.repartition: "resend-repartition", .deadLetter: "dlq"], commitInterval: 300)
        first.maxBatch = 512
        // As the worker makes them: the group's own identity, recorded in their commits.
        let normalize = NormalizeStage(
            sourcePartitions: 8, repartitionPartitions: 4, identity: settings.identity, limits: settings.limits, maxFutureSkew: settings.maxFutureSkew, idleTimeout: settings.window.idleTimeout,
            originals: OriginalRule(window: settings.window))
        let crashed = try StageRunner(stage: normalize, settings: first, logger: Logger(label: "test")).run()
        let routed = crashed.accounting.accepted
        #expect(routed > 5_000 && crashed.committed.isEmpty)

        // 2. The aggregate stage counts those events and commits its checkpoint (the seen map).
        let aggregate = AggregateStage(
            input: RepartitionInput(partitionCount: 4, identity: settings.identity), window: settings.window, shards: 2,
            identity: settings.identity)
        var second = first
        second.topic = "resend-repartition"
        second.assignment = .group
        second.consumer = settings.consumerConfig(group: settings.aggregateGroup)
        second.destinations = [.output: "aggregates", .deadLetter: "dlq"]
        // The worker's own state topic (`--state-topic`, `<group>-state`), which its restart reads back.
        let counted = try StageRunner(stage: aggregate, stateTopic: "resend-state", settings: second, logger: Logger(label: "test")).run()
        #expect(counted.accounting.accepted == routed && !counted.committed.isEmpty)

        // 3. The worker restarts: its normalize stage has no commit, so it sends every event again.
        let metrics = PipelineMetrics()
        let restart = try Pipeline(config: settings, metrics: metrics).run()
        let after = restart.stages[1].accounting
        #expect(restart.stages[0].accounting.accepted == routed, "every event was sent again")
        #expect(after.duplicates == routed, "and every copy was recognised")
        #expect(after.deadLettered[.tooLate] == 0)
        #expect(metrics.registry.emitToString().contains("trackpipe_duplicates_dropped_total{stage=\"aggregate\"} \(routed)\n"))
        let out = try contents(broker)
        let problems = out.mismatches(against: corpus.expected(windowSize: Self.window))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        let tooLate = out.deadLetters.compactMap { DeadLetter(headers: $0.headers) }.filter { $0.reason == .tooLate }
        #expect(tooLate.isEmpty)
    }

    @Test("one input partition minutes behind the others: its hits still count in their windows, none is too_late")
    func laggingPartitionIsCounted() throws {
        let broker = try makeBroker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 8_000, seed: 41, deliveries: 5, span: 20 * 60_000, badRate: 0)).generate())
        try produce(corpus, 0..<corpus.hits.count, on: broker, except: 3)
        let worker = LiveWorker(config(broker, group: "lag"))
        defer { _ = try? worker.stop() }
        let others = (0..<corpus.hits.count).filter { $0 % 8 != 3 }.count
        #expect(eventually { worker.metric("trackpipe_messages_consumed_total{stage=\"normalize\"}") >= Double(others) })
        // The others' windows close (partition 3 is idle), then partition 3 arrives, minutes behind.
        #expect(eventually { worker.metric("trackpipe_aggregates_emitted_total{stage=\"aggregate\"}") > 0 })
        let emittedBefore = worker.metric("trackpipe_aggregates_emitted_total{stage=\"aggregate\"}")
        try produce(corpus, 0..<corpus.hits.count, on: broker, only: 3)
        #expect(eventually { worker.metric("trackpipe_messages_consumed_total{stage=\"normalize\"}") >= Double(corpus.hits.count) })
        #expect(eventually { worker.metric("trackpipe_aggregates_emitted_total{stage=\"aggregate\"}") > emittedBefore })
        // The corrections and the last windows come out while it runs (idle sources: the
        // watermark follows the clock): wait for the output to reach the exact counts.
        let reference = corpus.expected(windowSize: Self.window)
        var running: [String] = []
        let converged = try eventually(every: 0.5) {
            running = try contents(broker).mismatches(against: reference)
            return running.isEmpty
        }
        #expect(converged, "while running: \(running.count) keys differ, e.g. \(running.prefix(3))")
        let summary = try worker.stop()
        #expect(summary.stages.allSatisfy { $0.accounting.balanced })
        #expect(summary.accounting.deadLettered[.tooLate] == 0)
        let out = try contents(broker)
        let problems = out.mismatches(against: reference)
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        #expect(out.revisions.values.contains { $0.count > 1 }, "the late partition's hits came as corrections")
        #expect(out.revisions.values.allSatisfy { $0 == $0.sorted() }, "revisions never go backwards")
    }

    @Test("a fourth instance joins three: the partitions that move are rebuilt by their new owner, and the output converges to exact counts")
    func joiningInstance() throws {
        let broker = try makeBroker()
        try broker.createTopic("join-repartition", partitions: 8)
        try broker.createTopic("join-state", partitions: 8)
        // Enough deliveries that every repartition partition has some: whichever partitions the
        // newcomer takes, the second half brings it events to count (with 12 deliveries, three
        // partitions had none, and a newcomer given two of them waited in vain).
        let corpus = Corpus(HitStream(HitStreamConfig(count: 8_000, seed: 51, deliveries: 40, span: 5 * 60_000)).generate())
        let routed = Set(corpus.hits[4_000...].compactMap { hit -> Int32? in
            if case .counted(let expected) = hit.truth { return DeliveryHash.partition(of: DeliveryID(expected.deliveryId), count: 8) }
            return nil
        })
        try #require(routed.count == 8, "the second half reaches every repartition partition: \(routed.sorted())")
        try produce(corpus, 0..<4_000, on: broker)
        func instance(_ number: Int) -> PipelineConfig {
            var settings = config(broker, group: "join")
            settings.kafkaProperties["client.id"] = "instance-\(number)"
            settings.commitInterval = 2_000
            return settings
        }
        let workers = (1...3).map { LiveWorker(instance($0)) }
        func total(_ series: String, _ all: [LiveWorker]) -> Double { all.map { $0.metric(series) }.reduce(0, +) }
        #expect(eventually { total("trackpipe_messages_consumed_total{stage=\"normalize\"}", workers) >= 4_000 })
        let fourth = LiveWorker(instance(4))
        let everyone = workers + [fourth]
        // Every repartition partition gets the normalize stage's marks every half second: the
        // newcomer reads them once it owns one, even when the previous owners had committed
        // every event before handing it over (then it has no event to count until more come).
        #expect(
            eventually { fourth.metric("trackpipe_watermark_marks_total{stage=\"aggregate\"}") > 0 },
            "the newcomer took partitions of the repartition topic")
        try produce(corpus, 4_000..<corpus.hits.count, on: broker)
        #expect(eventually { total("trackpipe_messages_consumed_total{stage=\"normalize\"}", everyone) >= Double(corpus.hits.count) })
        #expect(
            eventually { fourth.metric("trackpipe_messages_consumed_total{stage=\"aggregate\"}") > 0 },
            "the newcomer counted events of its partitions")
        // Continuous output converges: the last record per key reaches the exact counts.
        let reference = corpus.expected(windowSize: Self.window)
        var problems: [String] = []
        let converged = try eventually(every: 0.5) {
            problems = try contents(broker).mismatches(against: reference)
            return problems.isEmpty
        }
        #expect(converged, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
        let summaries = try everyone.map { try $0.stop() }
        for summary in summaries { #expect(summary.stages.allSatisfy { $0.accounting.balanced }) }
        let out = try contents(broker)
        // Stopping every instance in turn hands partitions around once more; an owner stopped
        // while it re-reads may leave an intermediate record last. The record with the highest
        // revision per key (what an upsert on revision keeps) still holds the full counts.
        let afterStop = out.mismatches(against: reference, highestRevision: true)
        #expect(afterStop.isEmpty, "\(afterStop.prefix(3))")
        let lettered = Set(out.deadLetters.compactMap { DeadLetter(headers: $0.headers) }.map { "\($0.sourcePartition)@\($0.sourceOffset)" })
        #expect(lettered.count == badCount(corpus))
        #expect(summaries.allSatisfy { $0.stages.allSatisfy { $0.accounting.offsetGaps == 0 } }, "no offsets skipped")
    }
}
