import RecordFormats
import Runner
import Kafka
import TrackingDomain
import Windowing

/// Everything `trackpipe run` can be told, already validated and in the units the code uses.
public struct PipelineConfig: Sendable {
    public var brokers: String = "localhost:9092"
    public var inputTopic: String = "tracking-hits"
    /// The output topic of each window size, in the order of `window.sizes` (ascending): one
    /// topic per size, so that a key `<deliveryId>@<windowStart>` means one window in each.
    public var outputTopics: [String] = ["tracking-aggregates"]
    public var deadLetterTopic: String = "tracking-hits-dlq"
    public var group: String = "trackpipe"
    /// The internal topic between the two stages; nil means `<group>-repartition`.
    public var repartitionTopic: String?
    /// The compacted topic the window tasks keep their state in; nil means `<group>-state`.
    public var stateTopic: String?
    /// The input is already keyed by `deliveryId`: skip the repartition stage and window the
    /// input topic directly (one stage). Exact with many instances only if that is true.
    public var inputKeyedByDelivery: Bool = false
    public var window: WindowConfig = WindowConfig()
    public var shards: Int = 1
    /// Consume up to the end offsets noted at assignment, emit every window, commit, and stop.
    public var untilEnd: Bool = false
    /// How long the start-up waits for a broker to answer before giving up (ms); nil waits as
    /// long as it takes (the live worker: an outage is no reason to exit). `run --until-end`
    /// sets it: a bounded job must end.
    public var connectTimeout: Int64?
    /// Every client's `client.id` unless `-X client.id` is given: what
    /// `kafka-consumer-groups --describe` shows in CLIENT-ID, and brokers in their logs and quotas.
    public var clientId: String = "trackpipe"
    /// librdkafka properties from `-X`, applied on top of trackpipe's defaults (both clients).
    public var kafkaProperties: [String: String] = [:]
    /// Static group membership (KIP-345): each stage's consumer joins its group with the
    /// `group.instance.id` `<instanceId>-<stage>`, so that a restart within `session.timeout.ms`
    /// gets its partitions back without a rebalance. Only the stages' own consumers get it (not
    /// the readers of commits and state, which never join), and each stage its own, so that
    /// `kafka-consumer-groups --describe` tells the stages' members apart. nil: dynamic members.
    public var instanceId: String?
    public var limits: NormalizerLimits = NormalizerLimits()
    /// How often safe offsets are committed while running (ms).
    public var commitInterval: Int64 = 5_000
    /// The least time between two purges of the repartition topic (ms): after a commit, the
    /// aggregate stage deletes the records below what its group committed (DeleteRecords); 0:
    /// never. One stage has no topic of its own to purge.
    public var purgeInterval: Int64 = 30_000
    /// A hit whose event time is more than this after its Kafka record's timestamp is
    /// dead-lettered as `future_timestamp` (ms): one device with a wrong clock must not move the
    /// watermark for everyone and turn every later hit into `too_late`.
    public var maxFutureSkew: Int64 = 3_600_000
    /// How often each stage logs a progress line (ms); 0 turns it off.
    public var progressInterval: Int64 = 30_000
    /// `/health/live` fails after a consume loop has not turned this long (ms); `/health/ready`
    /// also after this long without a reachable broker, with a commit waiting on the cluster,
    /// or with a restore that reads nothing.
    public var unhealthyAfter: Int64 = 60_000
    /// Time every phase of each stage's loop, produce calls one by one (`run --timings`).
    public var timings = false
    /// Largest batch taken from the consumer at once (but for the normalize stage of two
    /// stages, which takes `NormalizeStage.maxBatch`).
    public var maxBatch: Int = 4_096
    /// How the user gave each setting the group is fixed to (`--window 5m`,
    /// `TRACKPIPE_WINDOW=5m`, a default), so that a refusal names it the same way; one missing
    /// here is named by its flag.
    public var given: [GroupIdentity.Setting: GivenSetting] = [:]
    /// Write into an output topic whose window size cannot be told (`--allow-unchecked-output`):
    /// its partitions end in records that are not aggregates (`WindowSizeCheck`).
    public var allowUncheckedOutput = false

    public init() {}

    /// Unacknowledged output above which a stage pauses its input: half the producer's queue
    /// (`queue.buffering.max.kbytes`), so a slow output makes the consumer stop fetching
    /// rather than the worker buffer without end or stall inside a send.
    var outputBacklogLimit: Int {
        let kbytes = producerConfig["queue.buffering.max.kbytes"].flatMap(Int.init) ?? 65_536
        return max(64 * 1024, kbytes * 1024 / 2)
    }

    /// The output topics, each with its size where there are several: for logs.
    var outputsText: String {
        outputTopics.count == 1
            ? outputTopics[0] : zip(window.lengths, outputTopics).map { "\($1) (\(WindowSize.text($0)))" }.joined(separator: ", ")
    }

    /// The repartition topic's name in effect.
    public var effectiveRepartitionTopic: String { repartitionTopic ?? "\(group)-repartition" }

    /// The state topic's name in effect.
    public var effectiveStateTopic: String { stateTopic ?? "\(group)-state" }

    /// What the group is fixed to, as this run asks for it.
    public var identity: GroupIdentity {
        GroupIdentity(
            group: group, inputTopic: inputTopic, windowSizes: window.lengths, repartitionTopic: inputKeyedByDelivery ? nil : effectiveRepartitionTopic,
            stateTopic: effectiveStateTopic)
    }

    /// How each setting the group is fixed to was given (`givenSetting`).
    public var givenSettings: [GroupIdentity.Setting: GivenSetting] {
        Dictionary(uniqueKeysWithValues: GroupIdentity.Setting.allCases.map { ($0, givenSetting($0)) })
    }

    /// How `setting` was given: as `given` says, else as its flag with the value in effect (two
    /// stages as the switch's default).
    public func givenSetting(_ setting: GroupIdentity.Setting) -> GivenSetting {
        if let given = given[setting] { return given }
        if setting == .inputKeyedByDelivery, !inputKeyedByDelivery {
            return GivenSetting(flag: setting.rawValue, text: "false", source: .defaultValue)
        }
        let text: String =
            switch setting {
            case .window: WindowSize.text(window.lengths)
            case .inputKeyedByDelivery: ""
            case .repartitionTopic: effectiveRepartitionTopic
            case .stateTopic: effectiveStateTopic
            }
        return GivenSetting(flag: setting.rawValue, text: text, source: .commandLine)
    }

    /// Refuses the topics a run or a replay writes (`outputs`, one per window size, or none for
    /// JSON Lines; `deadLetter`) where they do not fit: the one rule of which topics may be the
    /// same. Each size has an output topic of its own. The input is none of the written topics, or
    /// trackpipe would read its own output; the dead letters go to a topic of their own, or a
    /// reader of either would find the other's records, and an output topic's check of its window
    /// size would find no aggregate at its end.
    package func checkWrittenTopics(outputs: [String], deadLetter: String?) throws {
        if !outputs.isEmpty, let problem = WindowSizeCheck.outputTopicsProblem(outputs, sizes: window.lengths) {
            throw PipelineError.configuration("--output-topic \(outputs.joined(separator: ",")) with \(givenSetting(.window).label): \(problem)")
        }
        if outputs.contains(inputTopic) || deadLetter == inputTopic {
            throw PipelineError.configuration(
                "the input topic \(inputTopic) must differ from the output and dead-letter topics, or trackpipe would read its own output")
        }
        if let deadLetter, outputs.contains(deadLetter) {
            throw PipelineError.configuration(
                "the dead-letter topic \(deadLetter) must differ from the output topics: aggregate records and dead letters in one topic would each be in the way of the other's readers")
        }
    }

    /// Kafka's rule for a topic name: 1 to 249 of `a-z A-Z 0-9 . _ -`. The internal topics'
    /// names are recorded in commit metadata, whose fields are separated by spaces.
    public static func isTopicName(_ name: String) -> Bool {
        (1...249).contains(name.utf8.count) && name.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x2E || byte == 0x5F
                || byte == 0x2D
        } && name != "." && name != ".."
    }

    /// What a refusal of a name `isTopicName` refuses says.
    public static let topicNameProblem = "not a Kafka topic name; use 1 to 249 letters, digits, '.', '_' and '-' (and not . or ..)"

    /// The consumer group of the aggregate stage behind the repartition topic; the group that
    /// reads the input topic is always `group`, so lag tools on it show the input's lag.
    public var aggregateGroup: String { "\(group)-aggregate" }

    /// librdkafka properties trackpipe sets itself; `-X` overrides win, except the few that
    /// the worker's guarantees depend on (see `enforcedConsumerProperties`).
    /// - Parameter readingAhead: a deep prefetch with large fetches, for `replay`, which reads
    ///   faster than the shallow prefetch's small fetches arrive (see below).
    /// - Parameter member: the stage whose consumer joins the group (`normalize`, `aggregate`):
    ///   with `instanceId` it gets its static `group.instance.id`. Readers that never join a group
    ///   (commit lookups, restores, `status`, `replay`) pass nil.
    package func consumerConfig(group: String, readingAhead: Bool = false, member: String? = nil) -> KafkaConfig {
        var defaults = [
            "bootstrap.servers": brokers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": "true",
            // Partitions an instance keeps keep their window state through a rebalance.
            "partition.assignment.strategy": "cooperative-sticky",
            // A shallow prefetch: librdkafka 2.0.2 stops fetching at either bound (counted over
            // the whole consumer queue) and looks again only when its broker thread wakes, which
            // the stage's consumer makes it do as soon as the queue has drained below them
            // (`FetchWakePolicy`). Deeper prefetch held up to 250 MB of fetched data and
            // per-message bookkeeping that the kernel had to hand out fresh: a fifth of the
            // worker's CPU (docs/performance.md).
            "queued.min.messages": "40000",
            "queued.max.messages.kbytes": "8192",
            // Fetch responses that size (librdkafka's default would be the queue bound, 8 MB):
            // each is one allocation, kept until its last message is consumed.
            "fetch.max.bytes": "\(Self.fetchMaxBytes(messageMaxBytes: kafkaProperties["message.max.bytes"]))",
            // A fetch that finds nothing new waits at most this long. A broker answers as soon
            // as records come, but librdkafka's embedded broker holds an empty fetch for the
            // whole wait: at the default 500 ms each of the two hops (input, repartition topic)
            // added up to half a second before a closed window's record (trackpipe-bench
            // freshness). An idle consumer asks a little more often; one that reads, no more.
            "fetch.wait.max.ms": "100",
            "client.id": clientId,
        ]
        if readingAhead {
            // librdkafka keeps one fetch in flight per broker: a reader that works faster than
            // 2 MB fetches arrive waits on them (replay read at half the rate, measured). Its
            // defaults (64 MB prefetched, fetches of up to 50 MB), with the message count out of
            // the way, as before the shallow prefetch.
            defaults["queued.min.messages"] = "1000000"
            defaults["queued.max.messages.kbytes"] = nil
            defaults["fetch.max.bytes"] = nil
        }
        if let member, let id = staticMemberId(stage: member) { defaults["group.instance.id"] = id }
        return KafkaConfig(defaults).merging(KafkaConfig(kafkaProperties.filter { !Self.producerOnly.contains($0.key) }))
            .merging(KafkaConfig(Self.enforcedConsumerProperties))
    }

    /// `trackpipe-<host>`: each instance named by its host (a pod's name on Kubernetes, where
    /// every pod would otherwise be `trackpipe`), in the characters Kafka's quotas and JMX take.
    public static func defaultClientId(host: String) -> String {
        let name = String(host.unicodeScalars.map { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0)) ? Character($0) : "-" })
        return name.isEmpty ? "trackpipe" : "trackpipe-\(name)"
    }

    /// What is wrong with an instance id, or nil. Kafka takes any string, but one with spaces
    /// or control characters is almost surely a templating mistake, and ids show up in
    /// `kafka-consumer-groups --describe`.
    public static func instanceIdProblem(_ id: String) -> String? {
        guard !id.isEmpty, id.count <= 200, id.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 32 && $0.value < 127 }) else {
            return "must be 1 to 200 printable ASCII characters without spaces, stable across restarts of one instance and different between instances (a StatefulSet's pod name, a host name)"
        }
        return nil
    }

    /// The `group.instance.id` of a stage's consumer with `--instance-id`, nil without it.
    public func staticMemberId(stage: String) -> String? {
        instanceId.map { "\($0)-\(stage)" }
    }

    /// Every configuration the worker gives librdkafka, checked as librdkafka will check it when
    /// the client is made, before any client exists or any broker is contacted (see
    /// `KafkaConfig.check`): a property that only the producer reads would otherwise fail after
    /// the metadata lookup had waited on the brokers.
    /// - Parameter readingAhead: the consumer as `replay` makes it.
    public func checkKafkaProperties(readingAhead: Bool = false) throws(KafkaConfigProblem) {
        try ReservedProperty.judge(kafkaProperties)
        try consumerConfig(group: group, readingAhead: readingAhead, member: "normalize").check(as: .consumer)
        try producerConfig.check(as: .producer)
        try adminConfig.check(as: .producer)
    }

    /// 2 MB, or `message.max.bytes` if that was set higher (librdkafka refuses a smaller
    /// `fetch.max.bytes`).
    static func fetchMaxBytes(messageMaxBytes: String?) -> Int {
        max(2 << 20, messageMaxBytes.flatMap { Int($0) } ?? 0)
    }

    var producerConfig: KafkaConfig {
        KafkaConfig([
            "bootstrap.servers": brokers,
            "client.id": clientId,
            "linger.ms": "20",
            "enable.idempotence": "true",
            // No compression: librdkafka 2.0.2's lz4 cost the two-stage worker about a tenth of
            // its CPU, compressing the repartition topic on one side and decompressing it on the
            // other (measured in docs/performance.md), and the worker's CPU is what limits its
            // rate. The repartition topic is about four times larger for it; where bytes cost
            // more, `-X compression.type=lz4` trades that CPU back for them.
            "compression.type": "none",
            // What waits in the producer, unacknowledged, is bounded in bytes (librdkafka's
            // default is 1 GB): the consume loop pauses its input at half of this (see
            // `StageRunner`), and a send waits once it is full.
            "queue.buffering.max.kbytes": "65536",
            // A record waits for the broker as long as it takes (librdkafka's default gives up
            // after 5 minutes and fails the record, which would stop the worker): an outage
            // costs a pause, not the run. What waits is bounded by the queue above, and the
            // consume loop pauses its input meanwhile.
            "message.timeout.ms": "0",
        ]).merging(KafkaConfig(kafkaProperties.filter { !Self.consumerOnly.contains($0.key) }))
    }

    /// For metadata and topic creation: connection and security settings only, and never
    /// creating a topic by asking about it.
    var adminConfig: KafkaConfig {
        KafkaConfig(["bootstrap.servers": brokers, "client.id": clientId])
            .merging(KafkaConfig(kafkaProperties.filter { !Self.consumerOnly.contains($0.key) && !Self.producerOnly.contains($0.key) }))
            .merging(KafkaConfig(["allow.auto.create.topics": "false"]))
    }

    /// Offsets are committed only by the worker, only below the safe mark.
    static let enforcedConsumerProperties = ["enable.auto.commit": "false", "enable.auto.offset.store": "false"]

    static let consumerOnly: Set<String> = [
        "group.id", "auto.offset.reset", "enable.partition.eof", "partition.assignment.strategy", "session.timeout.ms",
        "heartbeat.interval.ms", "max.poll.interval.ms", "fetch.min.bytes", "fetch.wait.max.ms", "fetch.max.bytes",
        "max.partition.fetch.bytes", "queued.min.messages", "queued.max.messages.kbytes", "isolation.level",
        "group.instance.id", "enable.auto.commit", "enable.auto.offset.store", "auto.commit.interval.ms", "check.crcs",
    ]
    static let producerOnly: Set<String> = [
        "linger.ms", "queue.buffering.max.ms", "batch.num.messages", "batch.size", "compression.type", "compression.codec",
        "acks", "request.required.acks", "enable.idempotence", "message.timeout.ms", "delivery.timeout.ms",
        "queue.buffering.max.messages", "queue.buffering.max.kbytes", "retries", "message.send.max.retries",
        "max.in.flight", "max.in.flight.requests.per.connection", "partitioner", "transactional.id",
    ]

    /// The connection's security settings, for the line that says the cluster does not answer:
    /// which protocol and mechanism, and which TLS and SASL properties are set (names only,
    /// never a value that could be a secret).
    var securitySummary: String {
        var parts = ["security.protocol=\(kafkaProperties["security.protocol"] ?? "plaintext")"]
        for key in ["sasl.mechanism", "sasl.mechanisms"] { if let value = kafkaProperties[key] { parts.append("\(key)=\(value)") } }
        let others = kafkaProperties.keys.filter { ($0.hasPrefix("ssl.") || $0.hasPrefix("sasl.")) && !$0.hasPrefix("sasl.mechanism") }.sorted()
        if !others.isEmpty { parts.append("set: " + others.joined(separator: ", ")) }
        return "-X " + parts.joined(separator: ", ")
    }

    /// Settings that would silently break the worker's guarantees are refused with a reason.
    public func validate() throws {
        do {
            try ReservedProperty.judge(kafkaProperties)
        } catch {
            throw PipelineError.configuration("-X \(error.properties[0])=\(kafkaProperties[error.properties[0]] ?? ""): \(error.reason)")
        }
        if let instanceId, let problem = Self.instanceIdProblem(instanceId) {
            throw PipelineError.configuration("--instance-id \(instanceId): \(problem)")
        }
        guard shards >= 1 else { throw PipelineError.configuration("--shards must be at least 1") }
        guard !inputTopic.isEmpty, !outputTopics.contains(""), !deadLetterTopic.isEmpty else {
            throw PipelineError.configuration("topic names must not be empty")
        }
        try checkWrittenTopics(outputs: outputTopics, deadLetter: deadLetterTopic)
        if !inputKeyedByDelivery {
            let repartition = effectiveRepartitionTopic
            guard !repartition.isEmpty, !([inputTopic, deadLetterTopic] + outputTopics).contains(repartition) else {
                throw PipelineError.configuration(
                    "--repartition-topic \(repartition) must differ from the input, output and dead-letter topics: it is trackpipe's internal topic")
            }
        }
        for setting in inputKeyedByDelivery ? [GroupIdentity.Setting.stateTopic] : [.repartitionTopic, .stateTopic] {
            let topic = setting == .stateTopic ? effectiveStateTopic : effectiveRepartitionTopic
            guard Self.isTopicName(topic) else {
                throw PipelineError.configuration(
                    "\(givenSetting(setting).label): \(Self.topicNameProblem)\(given[setting]?.source == .defaultValue ? "; the default follows --group, so give --\(setting.rawValue) a name of its own" : "")")
            }
        }
        let state = effectiveStateTopic
        let others = [inputTopic, deadLetterTopic] + outputTopics + (inputKeyedByDelivery ? [] : [effectiveRepartitionTopic])
        guard !state.isEmpty, !others.contains(state) else {
            throw PipelineError.configuration(
                "--state-topic \(state) must differ from the input, output, dead-letter and repartition topics: it holds the window tasks' state")
        }
    }
}

extension PipelineError {
    /// A bounded command (`replay`, `run --until-end`) gives up on a cluster that does not
    /// answer: what happened (`detail`), and what to check, in the same words everywhere.
    public static func noBrokerAnswered(_ detail: String, config: PipelineConfig) -> PipelineError {
        .kafka(
            "\(detail). No broker at \(config.brokers) answered: check --brokers and the security settings (\(config.securitySummary)), the network and the brokers' advertised listeners")
    }
}
