import Foundation
import HitGenerator
import Kafka
import Logging
import Pipeline
import Synchronization
import Testing
import TrackingDomain
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
        #expect(warning.contains("old input sent again to a live worker") && warning.contains("trackpipe replay"))
        // Lines before the group has assigned partitions say so instead of a lag of 0.
        let lines = captured.all.map(\.1).filter { $0.hasPrefix("normalize: consumed ") }
        #expect(lines.allSatisfy { $0.contains("/s), lag ") || $0.contains("/s), owns no partitions, ") }, "\(lines)")
        let line = try #require(lines.first { $0.contains("/s), lag ") }, "\(lines)")
        #expect(line.contains("dead-lettered") && line.contains("in the last"))
    }

    @Test(
        "a live --emit final worker says how many windows it holds unwritten and when the first is due, in its progress lines, its gauges and its summary when stopped"
    )
    func finalEmissionSaysWhatItHolds() throws {
        let broker = try makeBroker()
        let captured = CapturedLog()
        var settings = config(broker, group: "holding")
        settings.window = WindowConfig(size: 60_000, grace: 1_000, retention: 3_600_000, idleTimeout: 1_000)
        settings.window = settings.window.emitting(.final)
        let worker = LiveWorker(settings, logger: captured.logger)
        var stopped = false
        defer { if !stopped { _ = try? worker.stop() } }
        // Five minutes of hits up to two minutes ago: with a retention of an hour, none of their
        // windows can be written for another 53 minutes at least.
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 84, deliveries: 4, start: now - 420_000, span: 300_000, badRate: 0)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let firstWindow = corpus.hits.compactMap { hit -> Int64? in
            if case .counted(let expected) = hit.truth { return EventTimeMath.windowStart(of: expected.eventTime, size: 60_000) }
            return nil
        }.min()!
        let due = RFC3339.format(epochMillis: firstWindow + 60_000 + 3_600_000)
        let counted = corpus.expected(windowSize: 60_000).byKey.count
        func holding(_ line: String) -> Bool {
            line.hasPrefix("aggregate: consumed ") && line.contains("; \(counted) windows pending (--emit final: written once event time passes their end plus the retention); the first is due when event time reaches \(due), now at ")
        }
        #expect(eventually { captured.all.contains { holding($0.1) } }, "\(captured.all.map(\.1).filter { $0.hasPrefix("aggregate: consumed") }.suffix(4))")
        // Once event time has moved between two lines (idle partitions follow the clock), the
        // line says roughly when on the wall clock.
        #expect(eventually { captured.all.contains { holding($0.1) && $0.1.contains(" if event time keeps the pace of the last ") } })
        let line = try #require(captured.all.first { holding($0.1) && $0.1.contains("keeps the pace") }?.1)
        #expect(line.contains(", emitted 0,"), "\(line)")
        #expect(worker.metric("trackpipe_windows_pending{stage=\"aggregate\",window=\"1m\"}") == Double(counted))
        let remaining = worker.metric("trackpipe_first_window_due_seconds{stage=\"aggregate\",window=\"1m\"}")
        #expect(remaining > 2_400 && remaining < 3_660, "event-time seconds until the first window is due: \(remaining)")
        #expect(!worker.metrics.registry.emitToString().contains("trackpipe_windows_pending{stage=\"normalize\""), "the normalize stage holds no windows")

        stopped = true
        let summary = try worker.stop()
        let text = summary.text
        #expect(
            text.contains("\n  pending       \(counted) windows pending (--emit final: written once event time passes their end plus the retention); the first is due when event time reaches \(due), now at "),
            "\(text)")
        #expect(summary.stages.last?.accounting.emitted == 0)
    }
}
