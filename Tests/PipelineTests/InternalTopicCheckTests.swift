import Kafka
@testable import Pipeline
@testable import Runner
import Testing

/// The settings of trackpipe's own topics, as the cluster describes them: what is refused, what
/// is warned of, and what is let through.
@Suite("internal topic settings")
struct InternalTopicCheckTests {
    static let brokers = "kafka:9092"

    /// Kafka's defaults for a topic, with `settings` over them (DescribeConfigs gives every entry).
    static func described(_ settings: [String: String]) -> [String: String] {
        [
            "cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1", "segment.ms": "604800000",
            "segment.bytes": "1073741824", "min.compaction.lag.ms": "0", "max.compaction.lag.ms": "9223372036854775807",
            "delete.retention.ms": "86400000",
        ].merging(settings) { $1 }
    }

    static func verdict(state: [String: String]? = nil, repartition: [String: String]? = nil) -> InternalTopicCheck.Verdict {
        var configs = TopicConfigs()
        if let state { configs.described["g-state"] = described(state) }
        if let repartition { configs.described["g-repartition"] = described(repartition) }
        return InternalTopicCheck.verdict(configs, stateTopic: "g-state", repartitionTopic: "g-repartition", brokers: brokers)
    }

    @Test("a state topic that only compacts is let through, whatever its retention.ms (ignored without delete), segment, lag and tombstone settings",
        arguments: [
            ["cleanup.policy": "compact"],
            ["cleanup.policy": "compact", "retention.ms": "3600000", "retention.bytes": "1000"],
            ["cleanup.policy": "compact", "segment.ms": "60000", "segment.bytes": "1048576", "min.compaction.lag.ms": "0", "max.compaction.lag.ms": "1000", "delete.retention.ms": "0"],
            ["cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"],
            ["cleanup.policy": " Compact , Delete ", "retention.ms": "-1"],
        ])
    func compactedStateTopics(_ settings: [String: String]) {
        let verdict = Self.verdict(state: settings)
        #expect(verdict.refusal == nil, "\(settings)")
        #expect(verdict.warnings.isEmpty)
    }

    @Test("a state topic that deletes by time or size is refused (exit 64) with the command that makes it compacted only",
        arguments: [
            (["cleanup.policy": "delete"], "is not compacted"),
            (["cleanup.policy": "delete", "retention.ms": "-1"], "is not compacted"),
            (["cleanup.policy": "compact,delete", "retention.ms": "604800000"], "retention.ms=604800000"),
            (["cleanup.policy": "delete,compact", "retention.ms": "-1", "retention.bytes": "1073741824"], "retention.bytes=1073741824"),
            (["cleanup.policy": ""], "is not compacted"),
        ])
    func deletingStateTopics(_ settings: [String: String], _ said: String) throws {
        let refusal = try #require(Self.verdict(state: settings).refusal)
        #expect(refusal.exitCode == 64)
        let text = "\(refusal)"
        #expect(text.contains("the state topic g-state") && text.contains(said), "\(text)")
        #expect(
            text.hasSuffix(
                "kafka-configs.sh --bootstrap-server kafka:9092 --alter --entity-type topics --entity-name g-state --add-config cleanup.policy=compact"),
            "\(text)")
    }

    @Test("the refusal's command fixes what it refuses: the settings it sets are let through")
    func theCommandFixesIt() throws {
        for settings in [["cleanup.policy": "delete"], ["cleanup.policy": "compact,delete"], ["cleanup.policy": "compact,delete", "retention.bytes": "5"]] {
            let refusal = try #require(Self.verdict(state: settings).refusal)
            let command = "\(refusal)".components(separatedBy: "--add-config ").last!
            let (key, value) = (String(command.split(separator: "=")[0]), String(command.split(separator: "=")[1]))
            #expect(Self.verdict(state: settings.merging([key: value]) { $1 }).refusal == nil, "\(settings) + \(command)")
        }
    }

    @Test("a compacted repartition topic is refused (its records have no key); a retention under a day, or by size, is warned of; a day or more is not")
    func repartitionTopic() throws {
        let compacted = try #require(Self.verdict(repartition: ["cleanup.policy": "compact"]).refusal)
        #expect(compacted.exitCode == 64 && "\(compacted)".contains("--add-config cleanup.policy=delete"), "\(compacted)")
        let short = Self.verdict(repartition: ["retention.ms": "3600000"])
        #expect(short.refusal == nil && short.warnings.count == 1 && short.warnings[0].contains("retention.ms=3600000 (1h)"), "\(short.warnings)")
        #expect(Self.verdict(repartition: ["retention.ms": "86399999"]).warnings.count == 1)
        #expect(Self.verdict(repartition: ["retention.ms": "86400000"]).warnings.isEmpty)
        #expect(Self.verdict(repartition: ["retention.ms": "604800000"]).warnings.isEmpty)
        #expect(Self.verdict(repartition: ["retention.ms": "-1"]).warnings.isEmpty)
        let sized = Self.verdict(repartition: ["retention.bytes": "1073741824"])
        #expect(sized.warnings.count == 1 && sized.warnings[0].contains("--delete-config retention.bytes"), "\(sized.warnings)")
    }

    @Test("only the internal topics are judged: the same settings on another topic, or on the repartition topic of a one-stage worker, pass")
    func onlyInternalTopics() {
        var configs = TopicConfigs()
        configs.described["tracking-aggregates"] = Self.described(["cleanup.policy": "delete"])
        configs.described["g-repartition"] = Self.described(["cleanup.policy": "compact"])
        let oneStage = InternalTopicCheck.verdict(configs, stateTopic: "g-state", repartitionTopic: nil, brokers: Self.brokers)
        #expect(oneStage.refusal == nil && oneStage.warnings.isEmpty)
    }

    @Test("a cluster that does not describe the topics (librdkafka's mock cluster): nothing refused, each topic reported unchecked at notice, and the worker goes on")
    func undescribedTopics() throws {
        let configs = TopicConfigs(undescribed: ["g-state": "_UNSUPPORTED_FEATURE: unsupported", "g-repartition": "_UNSUPPORTED_FEATURE: unsupported"])
        let verdict = InternalTopicCheck.verdict(configs, stateTopic: "g-state", repartitionTopic: "g-repartition", brokers: Self.brokers)
        #expect(verdict.refusal == nil && verdict.unchecked.count == 2)
        let log = CapturedLog()
        try InternalTopicCheck.report(verdict, logger: log.logger)
        let notices = log.all.filter { $0.0 == .notice }.map(\.1)
        #expect(notices.count == 2 && notices.allSatisfy { $0.contains("could not check the settings of") && $0.contains("UNSUPPORTED_FEATURE") }, "\(notices)")
    }

    @Test("a refusal is thrown after the notices and warnings are logged")
    func reportThrowsTheRefusal() {
        let verdict = Self.verdict(state: ["cleanup.policy": "delete"], repartition: ["retention.ms": "1000"])
        let log = CapturedLog()
        #expect(throws: PipelineError.self) { try InternalTopicCheck.report(verdict, logger: log.logger) }
        #expect(log.all.contains { $0.0 == .warning && $0.1.contains("g-repartition") })
    }
}
