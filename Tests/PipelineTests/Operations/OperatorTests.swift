import Foundation
import HitGenerator
import Kafka
import Logging
import Pipeline
import Synchronization
import Testing
import TrackpipeTestSupport
import Windowing

/// What an operator sees: `/health` telling the truth, progress lines, and a loud warning when
/// hits start going to the dead-letter topic as too late.
@Suite("Operator signals on the embedded broker", .serialized)
struct OperatorTests {
    func config(_ broker: EmbeddedBroker, group: String) -> PipelineConfig {
        var config = TestTopics.config(
            broker, group: group, window: WindowConfig(size: 60_000, grace: 1_000, retention: 600_000, idleTimeout: 1_000))
        config.commitInterval = 500
        config.unhealthyAfter = 2_000
        config.progressInterval = 500
        config.kafkaProperties["log_level"] = "0"
        return config
    }

    func makeBroker() throws -> EmbeddedBroker { try TestTopics.broker(inputPartitions: 4, outputPartitions: 2) }

    @Test("/health says so when no broker answers for a while, and recovers when one does")
    func healthFollowsTheBroker() throws {
        let broker = try makeBroker()
        let captured = CapturedLog()
        let worker = LiveWorker(config(broker, group: "health"), logger: captured.logger)
        defer { _ = try? worker.stop() }
        // Running: both stages hold their partitions, and /health says so.
        #expect(eventually {
            let lines = captured.all.map(\.1)
            return lines.contains { $0.hasPrefix("normalize: assigned ") } && lines.contains { $0.hasPrefix("aggregate: assigned ") }
        }, "\(captured.all.map(\.1).suffix(5))")
        #expect(eventually { worker.pipeline.problem(.ready) == nil }, "\(worker.pipeline.problem(.ready) ?? "")")
        try broker.setBrokerDown(1)
        var problem: String?
        #expect(eventually {
            problem = worker.pipeline.problem(.ready)
            return problem?.contains("no Kafka broker at \(broker.bootstrapServers) has answered for") == true
        }, "\(problem ?? "healthy")")
        #expect(worker.metric("trackpipe_broker_reachable") == 0)
        try broker.setBrokerUp(1)
        #expect(eventually { worker.pipeline.problem(.ready) == nil }, "\(worker.pipeline.problem(.ready) ?? "")")
        #expect(worker.metric("trackpipe_broker_reachable") == 1)
    }

    @Test("a group that never assigns partitions: logged as waiting, and /health names the group")
    func waitingForAssignment() throws {
        let broker = try makeBroker()
        // The coordinator refuses every join for a while.
        broker.failNextRequests(.joinGroup, with: Array(repeating: KafkaErrorCode.notCoordinator, count: 400))
        let captured = CapturedLog()
        let logger = captured.logger
        var settings = config(broker, group: "nojoin")
        settings.unhealthyAfter = 1_500
        let worker = LiveWorker(settings, logger: logger)
        defer { _ = try? worker.stop() }
        var problem: String?
        #expect(eventually {
            problem = worker.pipeline.problem(.ready)
            return problem?.contains("has not assigned partitions") == true
        }, "\(problem ?? "healthy")")
        #expect(problem?.contains("nojoin") == true)
        #expect(eventually { captured.all.contains { $0.1.contains("waiting for partition assignment of hits") } })
    }

    @Test("progress lines every interval, and a warning naming the likely cause when too_late jumps")
    func progressAndTooLateWarning() throws {
        let broker = try makeBroker()
        let captured = CapturedLog()
        let logger = captured.logger
        let worker = LiveWorker(config(broker, group: "progress"), logger: logger)
        defer { _ = try? worker.stop() }
        // A stream, then far older hits: their windows are long gone.
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let fresh = Corpus(HitStream(HitStreamConfig(count: 3_000, seed: 81, deliveries: 4, start: now - 600_000, span: 300_000, badRate: 0)).generate())
        try fresh.produce(0..<fresh.hits.count, to: "hits", on: broker)
        #expect(eventually { captured.all.contains { $0.1.hasPrefix("aggregate: consumed ") } })
        // Event time has moved past the fresh hits' first windows: a day-old hit is late.
        #expect(eventually { worker.metric("trackpipe_watermark_ms{stage=\"aggregate\"}") > Double(now - 550_000) })
        let old = Corpus(HitStream(HitStreamConfig(count: 400, seed: 82, deliveries: 4, start: now - 86_400_000, span: 60_000, badRate: 0)).generate())
        try old.produce(0..<old.hits.count, to: "hits", on: broker)
        #expect(
            eventually { captured.all.contains { $0.0 == .warning && $0.1.contains("were too late for their windows") } },
            "\(captured.all.map(\.1).filter { $0.contains("consumed") }.suffix(6))")
        let warning = try #require(captured.all.first { $0.1.contains("were too late") }?.1)
        #expect(warning.contains("old input replayed into a live worker") && warning.contains("trackpipe replay"))
        // Lines before the group has assigned partitions say so instead of a lag of 0.
        let lines = captured.all.map(\.1).filter { $0.hasPrefix("normalize: consumed ") }
        #expect(lines.allSatisfy { $0.contains("/s), lag ") || $0.contains("/s), owns no partitions, ") }, "\(lines)")
        let line = try #require(lines.first { $0.contains("/s), lag ") }, "\(lines)")
        #expect(line.contains("dead-lettered") && line.contains("in the last"))
    }
}
