import Foundation
import Kafka
import Logging
import Testing

@testable import Pipeline
@testable import Runner

/// What an operator sees of the purges: a refusal said once with what to do, every answer
/// counted, and the worker going on whatever the cluster answers.
@Suite("purge coordinator: refusals said once, counted, asked again")
struct PurgeCoordinatorTests {
    /// A cluster whose answer to each request is scripted: the next refusal, or a purge.
    final class ScriptedDeletions: RecordDeletionClient {
        // @unchecked: used from the test's thread only.
        var refusals: [RecordDeletionError.Kind?] = []
        private(set) var requests: [[TopicPartitionOffset]] = []
        private var waiting: [[RecordDeletion]] = []

        func requestDeletion(below offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws {
            requests.append(offsets)
            let refusal = refusals.isEmpty ? nil : refusals.removeFirst()
            waiting.append(
                offsets.map { offset in
                    RecordDeletion(
                        partition: offset.topicPartition, below: offset.offset,
                        outcome: refusal.map { .failure(RecordDeletionError($0, KafkaError(.librdkafka(code: -1), "\($0)"))) } ?? .success(offset.offset))
                })
        }

        func answer(waitingMilliseconds: Int32) -> [RecordDeletion]? { waiting.isEmpty ? nil : waiting.removeFirst() }
    }

    struct Harness {
        let cluster = ScriptedDeletions()
        let log = CapturedLog()
        let metrics = PipelineMetrics()
        var coordinator: PurgeCoordinator

        init(interval: Int64 = 30_000) throws {
            var settings = RunnerSettings(
                topic: "g-repartition", assignment: .group, bound: .unbounded, consumer: KafkaConfig([:]), producer: KafkaConfig([:]),
                destinations: [:], commitInterval: 5_000)
            coordinator = PurgeCoordinator(
                RunnerContext(stageName: "aggregate", settings: settings, logger: log.logger, metrics: metrics.stage("aggregate")),
                purge: PurgeSettings(interval: interval), client: cluster)
        }

        /// A commit of partitions 0 and 1 at `offset`, then the turn that collects the answer.
        mutating func commit(_ offset: Int64, at now: Int64) {
            coordinator.afterCommit(
                [TopicPartitionOffset(topic: "g-repartition", partition: 0, offset: offset), TopicPartitionOffset(topic: "g-repartition", partition: 1, offset: offset)],
                now: now)
            coordinator.collect()
        }

        func count(_ outcome: String) -> Int {
            let text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
            let line = text.split(separator: "\n").first {
                $0.hasPrefix("trackpipe_repartition_purges_total{") && $0.contains("outcome=\"\(outcome)\"") && $0.contains("stage=\"aggregate\"")
            }
            return line.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }.map { Int($0) } ?? -1
        }

        func lines(containing text: String) -> [(Logger.Level, String)] { log.all.filter { $0.1.contains(text) } }
    }

    @Test("every outcome is a series at 0 before the first purge")
    func registeredAtZero() throws {
        let harness = try Harness()
        for outcome in ["purged", "unsupported", "not_authorized", "transient", "failed"] { #expect(harness.count(outcome) == 0, "\(outcome)") }
    }

    @Test("a cluster without DeleteRecords: said once as a warning with what it means, counted per partition every time, asked again every interval")
    func unsupportedSaidOnce() throws {
        var harness = try Harness()
        harness.cluster.refusals = Array(repeating: .unsupported, count: 5)
        for round in 0..<5 { harness.commit(Int64(100 * (round + 1)), at: Int64(round) * 30_000) }
        #expect(harness.cluster.requests.count == 5, "asked again at each interval")
        #expect(harness.count("unsupported") == 10, "two partitions, five times")
        let said = harness.lines(containing: "the cluster does not delete records")
        #expect(said.count == 1, "\(harness.log.all)")
        #expect(said.first?.0 == .warning)
        #expect(said.first?.1.contains("retention.ms") == true && said.first?.1.contains("Nothing is lost") == true, "\(said)")
    }

    @Test("no Delete grant: said once naming the grant; once granted, purges go through without a restart, said once")
    func notAuthorizedThenGranted() throws {
        var harness = try Harness()
        harness.cluster.refusals = [.notAuthorized, .notAuthorized, nil, nil]
        for round in 0..<4 { harness.commit(Int64(100 * (round + 1)), at: Int64(round) * 30_000) }
        let grant = harness.lines(containing: "--operation Delete --topic g-repartition")
        #expect(grant.count == 1, "\(harness.log.all)")
        #expect(harness.count("not_authorized") == 4)
        #expect(harness.count("purged") == 4)
        #expect(harness.lines(containing: "works again").count == 1, "\(harness.log.all)")
    }

    @Test("transient failures: a run of them said once, asked again at the next interval, and the first purge after them said")
    func transientRetried() throws {
        var harness = try Harness(interval: 1_000)
        harness.cluster.refusals = [nil, .transient, .transient, .other, nil, nil]
        for round in 0..<6 { harness.commit(Int64(10 * (round + 1)), at: Int64(round) * 1_000) }
        #expect(harness.cluster.requests.count == 6)
        #expect(harness.count("transient") == 4 && harness.count("failed") == 2 && harness.count("purged") == 6)
        #expect(harness.lines(containing: "purging g-repartition failed").count == 1, "\(harness.log.all)")
        #expect(harness.lines(containing: "purged g-repartition up to the committed offsets").count == 1, "the first purge, said at info")
        #expect(harness.lines(containing: "works again").count == 1)
    }
}
