import Runner
import Foundation
import Kafka
import Logging
import Synchronization
import Windowing

/// What the settings of trackpipe's own topics must not be, where the cluster says what they are
/// (DescribeConfigs): checked at start-up, before anything is read or written.
///
/// - **The state topic** holds the window state the worker reads back after a restart or a
///   rebalance. Only compaction may remove its records (compaction keeps the last record of every
///   key, and removes a tombstone only after `delete.retention.ms`). A state topic that also deletes
///   by time or size (`cleanup.policy` without `compact`, or `compact,delete` with a finite
///   `retention.ms` or `retention.bytes`) deletes whole segments, live records in them: a segment of
///   a window that is still retained, the head of a window that took no hit for a while, the task
///   record of a partition whose input is quiet. The restore would then miss hits, or stop the
///   worker. It is refused (exit 64) with the command that fixes it. The other settings cannot
///   delete a live record: `segment.ms` and `segment.bytes` only say when a segment closes (and
///   becomes cleanable), `min.compaction.lag.ms` and `max.compaction.lag.ms` when compaction may or
///   must run, `delete.retention.ms` how long a tombstone stays. A tombstone removed while a restore
///   reads (a `delete.retention.ms` shorter than a restore) can make the restore see a deleted
///   record as live: a segment no head names (deleted again), or the head of an evicted window
///   (past the horizon the task record holds, so sent no more and deleted again).
/// - **The repartition topic** holds what the aggregate stage has not counted yet. Its records have
///   no key, which a compacted topic refuses (refused too). A retention shorter than
///   `repartitionRetentionFloor` is warned of: a restart after an outage of the aggregate stage
///   longer than that finds its backlog deleted (an offset gap).
package enum InternalTopicCheck {
    /// A day: a restart may need the repartition topic to hold the aggregate stage's backlog
    /// through an outage of that stage (a crash loop, a cluster problem, a bad version rolled
    /// back) noticed and fixed within a working day. Below it, an outage is more likely to outlast
    /// the backlog than to be fixed in time.
    package static let repartitionRetentionFloor: Int64 = 86_400_000

    /// What the check found.
    package struct Verdict: Equatable, Sendable {
        /// A topic that would lose what the worker needs: the worker does not start.
        package var refusal: PipelineError?
        package var warnings: [String] = []
        /// Topics the cluster did not describe, with why: not checked.
        package var unchecked: [String: String] = [:]
    }

    package static func verdict(_ configs: TopicConfigs, stateTopic: String, repartitionTopic: String?, brokers: String) -> Verdict {
        var verdict = Verdict(unchecked: configs.undescribed)
        if let state = configs.described[stateTopic], let problem = stateProblem(state) {
            verdict.refusal = .topicSettings(
                "the state topic \(stateTopic) \(problem): window state still needed would be deleted, and a restore would miss hits or stop. Only compaction may remove its records: kafka-configs.sh --bootstrap-server \(brokers) --alter --entity-type topics --entity-name \(stateTopic) --add-config cleanup.policy=compact"
            )
        }
        if let repartitionTopic, let settings = configs.described[repartitionTopic] {
            let policies = policies(settings)
            if policies.contains("compact") {
                verdict.refusal = verdict.refusal
                    ?? .topicSettings(
                        "the repartition topic \(repartitionTopic) has cleanup.policy=\(settings["cleanup.policy"] ?? ""): its records have no key, which a compacted topic refuses. It needs time-based retention only: kafka-configs.sh --bootstrap-server \(brokers) --alter --entity-type topics --entity-name \(repartitionTopic) --add-config cleanup.policy=delete"
                    )
            } else {
                verdict.warnings += repartitionWarnings(settings, topic: repartitionTopic)
            }
        }
        return verdict
    }

    /// Logs what could not be checked (notice) and the warnings, and throws the refusal.
    package static func report(_ verdict: Verdict, logger: Logger) throws {
        for (topic, reason) in verdict.unchecked.sorted(by: { $0.key < $1.key }) {
            logger.notice(
                "could not check the settings of \(topic): the cluster did not describe them (\(reason)). Going on; make sure the state topic is compacted without time or size retention, and the repartition topic keeps records a day or more (docs/deploy.md)")
        }
        for warning in verdict.warnings { logger.warning("\(warning)") }
        if let refusal = verdict.refusal { throw refusal }
    }

    /// Why a state topic with these settings could delete a live record (nil: it cannot).
    static func stateProblem(_ settings: [String: String]) -> String? {
        let policies = policies(settings)
        guard let policy = settings["cleanup.policy"] else { return nil }
        guard policies.contains("compact") else {
            return "is not compacted (cleanup.policy=\(policy)): it deletes records older than retention.ms=\(settings["retention.ms"] ?? "?"), and keeps every older version of a window"
        }
        guard policies.contains("delete") else { return nil }
        if let time = settings["retention.ms"], time != "-1" {
            return "deletes by time as well as compacting (cleanup.policy=\(policy), retention.ms=\(time)): every segment older than that goes, live records in it"
        }
        if let bytes = settings["retention.bytes"], bytes != "-1" {
            return "deletes by size as well as compacting (cleanup.policy=\(policy), retention.bytes=\(bytes)): the oldest segments of a partition beyond that go, live records in them"
        }
        return nil
    }

    /// What a restart may miss with these retention settings of the repartition topic.
    static func repartitionWarnings(_ settings: [String: String], topic: String) -> [String] {
        var warnings: [String] = []
        if let time = settings["retention.ms"].flatMap({ Int64($0) }), time >= 0, time < repartitionRetentionFloor {
            warnings.append(
                "the repartition topic \(topic) keeps records for retention.ms=\(time) (\(WindowSize.text(time))), less than a day: if the aggregate stage is down or behind for longer (a crash loop, a cluster problem), the events it has not counted yet are deleted, and the restart reports them as an offset gap. Give it a day or more: kafka-configs.sh --alter --entity-type topics --entity-name \(topic) --add-config retention.ms=86400000")
        }
        if let bytes = settings["retention.bytes"].flatMap({ Int64($0) }), bytes >= 0 {
            warnings.append(
                "the repartition topic \(topic) keeps at most retention.bytes=\(bytes) per partition: a backlog of the aggregate stage beyond that (the input's rate times an outage) is deleted before it is counted, and the restart reports an offset gap. Unless that is meant, remove it: kafka-configs.sh --alter --entity-type topics --entity-name \(topic) --delete-config retention.bytes")
        }
        return warnings
    }

    private static func policies(_ settings: [String: String]) -> Set<String> {
        Set((settings["cleanup.policy"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
    }
}

/// DescribeConfigs for the internal topics, asked on a thread of its own as the start-up begins
/// (through the client that already asked whether the cluster answers), so that the start-up's
/// other questions to the cluster run meanwhile; judged (`check`) once the topics exist, before the
/// runners start.
final class TopicSettingsQuestion: Sendable {
    /// How long the cluster has to answer. A cluster answers DescribeConfigs in milliseconds (one
    /// that does not answer in time is not checked, and says so); librdkafka 2.0.2's mock cluster
    /// never does (it waits for a controller until the timeout), and a start on it pays what of
    /// this its other questions did not take (measured: 2.8 s more per start with 3 s, 0.9 s
    /// with 1 s).
    static let timeoutMilliseconds: Int32 = 1_000

    let stateTopic: String
    let repartitionTopic: String?
    let brokers: String
    private let answer = Mutex<TopicConfigs?>(nil)
    private let answered = DispatchSemaphore(value: 0)

    init(admin: TopicAdmin, config: PipelineConfig, repartitionTopic: String?) {
        stateTopic = config.effectiveStateTopic
        self.repartitionTopic = repartitionTopic
        brokers = config.brokers
        let topics = [stateTopic] + (repartitionTopic.map { [$0] } ?? [])
        let thread = Thread { [self] in
            let configs = admin.topicConfigs(topics, timeoutMilliseconds: Self.timeoutMilliseconds)
            answer.withLock { $0 = configs }
            answered.signal()
        }
        thread.name = "trackpipe.topic-settings"
        thread.start()
    }

    /// Waits for the answer (at most the request's timeout) and judges it. The topics this start
    /// created have the settings trackpipe gave them: they are not judged.
    func check(created: [String], logger: Logger) throws {
        answered.wait()
        answered.signal()
        var configs = answer.withLock { $0 } ?? TopicConfigs()
        for topic in created {
            configs.described[topic] = nil
            configs.undescribed[topic] = nil
        }
        try InternalTopicCheck.report(
            InternalTopicCheck.verdict(configs, stateTopic: stateTopic, repartitionTopic: repartitionTopic, brokers: brokers), logger: logger)
    }
}
