import Foundation
import HitGenerator
import Kafka
import Pipeline
import RecordFormats
import Testing
import TrackingDomain
import TrackpipeTestSupport

@testable import TrackpipeCLI

/// One group is one pipeline, end to end with the real binary on the embedded broker: every way
/// an adversarial user could try to run a group as another pipeline (another window size, mode,
/// internal topic, changed alone or together, by flag or by variable, or with another input
/// topic), or to point another group at its internal topics, or to write windows of another
/// size into an output topic whose partitions end in tombstones and junk, exits 64 before
/// anything is written; the group's own pipeline then goes on and counts every hit.
@Suite("trackpipe run and replay: what a group and an output topic are fixed to", .serialized)
struct GroupIdentityCommandTests {
    static let minute: Int64 = 60_000

    /// hits, aggregates and dlq, g1's internal topics, and the topics the refused runs name (all
    /// of 4 partitions, made beforehand so that a run that wrote anywhere would show it).
    func makeBroker(also topics: [String] = []) throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        for topic in ["hits", "aggregates", "g1-repartition", "g1-state"] + topics { try broker.createTopic(topic, partitions: 4) }
        try broker.createTopic("dlq", partitions: 2)
        return broker
    }

    func run(_ broker: EmbeddedBroker, _ arguments: [String], environment: [String: String] = [:]) throws -> TrackpipeBinary.Result {
        try TrackpipeBinary.locate().run(
            ["run", "--until-end", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--dlq-topic", "dlq", "--log-level", "warning",
             "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500"] + arguments,
            environment: environment)
    }

    /// Every partition's end offset of each topic: what was written.
    func ends(_ broker: EmbeddedBroker, _ topics: [String]) throws -> [String: [Int64]] {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "ends-\(UUID())", "log_level": "3"]))
        var ends: [String: [Int64]] = [:]
        for topic in topics {
            let count: Int32 = topic == "dlq" ? 2 : 4
            ends[topic] = try reader.endOffsets((0..<count).map { TopicPartition(topic: topic, partition: $0) }).map(\.offset)
        }
        return ends
    }

    /// What a group has committed on a topic's 4 partitions (negative: nothing), with its metadata.
    func commits(_ broker: EmbeddedBroker, group: String, topic: String) throws -> [String] {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "3"]))
        return try reader.committed((0..<4).map { TopicPartition(topic: topic, partition: $0) }).map { "\($0.offset) \($0.metadata ?? "")" }
    }

    func contents(_ broker: EmbeddedBroker, output: String = "aggregates") throws -> TopicContents {
        try TopicContents(broker: broker, output: output, outputPartitions: 4, dlq: "dlq", dlqPartitions: 2)
    }

    @Test("the group with another --repartition-topic and --window (and every other way to run it as another pipeline) exits 64 naming each setting as given, writes and commits nothing; the group's own pipeline then counts every hit, and a new group is the way to count the other size")
    func anotherPipelineUnderTheGroup() throws {
        let elsewhere = ["g1-rep2", "g1-state2", "new5", "hits-b"]
        // The new group's internal topics too: newer librdkafkas' embedded brokers create none.
        let broker = try makeBroker(also: elsewhere + ["g5-repartition", "g5-state"])
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 401, deliveries: 6, span: 30 * Self.minute)).generate())
        try corpus.produce(0..<1_000, to: "hits", on: broker)
        let other = Corpus(HitStream(HitStreamConfig(count: 100, seed: 402, deliveries: 2, deliverySeed: 4_402)).generate())
        try other.produce(0..<other.hits.count, to: "hits-b", on: broker)
        let first = try run(broker, ["--group", "g1", "--output-topic", "aggregates"])
        try #require(first.exitCode == 0, "\(first.stderr)")
        try corpus.produce(1_000..<2_000, to: "hits", on: broker)

        let topics = ["hits", "aggregates", "dlq", "g1-repartition", "g1-state"] + elsewhere
        let written = try ends(broker, topics)
        let committed = [
            try commits(broker, group: "g1", topic: "hits"), try commits(broker, group: "g1-aggregate", topic: "g1-repartition"),
            try commits(broker, group: "g1-aggregate", topic: "g1-rep2"), try commits(broker, group: "g1", topic: "hits-b"),
        ]
        #expect(
            committed[0].allSatisfy { $0.contains(" trackpipe/source/2 epoch=0 ") && $0.hasSuffix(" window=60000 stages=2 repartition=g1-repartition state=g1-state") },
            "g1's input commits record what it is fixed to: \(committed[0])")
        #expect(committed[1].allSatisfy { $0.contains(" trackpipe/5 ") && $0.contains(" window=60000 stages=2 repartition=g1-repartition state=g1-state") })

        let ways: [(arguments: [String], environment: [String: String], says: [String], never: [String])] = [
            // The issue's run: another size into other internal topics and another output.
            (["--group", "g1", "--window", "5m", "--repartition-topic", "g1-rep2", "--state-topic", "g1-state2", "--output-topic", "new5"], [:],
             ["the group g1 runs another pipeline than this run asks for", "it counts windows of 1m and this run asks for --window 5m",
              "its repartition topic is g1-repartition and this run asks for --repartition-topic g1-rep2",
              "its state topic is g1-state and this run asks for --state-topic g1-state2",
              "Go back to the group's settings (--window 1m, --repartition-topic g1-repartition, --state-topic g1-state)", "new --group"], []),
            // The same from the environment: named as the variables, never as flags.
            ([], ["TRACKPIPE_GROUP": "g1", "TRACKPIPE_WINDOW": "5m", "TRACKPIPE_REPARTITION_TOPIC": "g1-rep2", "TRACKPIPE_STATE_TOPIC": "g1-state2",
                  "TRACKPIPE_OUTPUT_TOPIC": "new5"],
             ["this run asks for TRACKPIPE_WINDOW=5m", "this run asks for TRACKPIPE_REPARTITION_TOPIC=g1-rep2",
              "this run asks for TRACKPIPE_STATE_TOPIC=g1-state2", "(TRACKPIPE_WINDOW=1m, TRACKPIPE_REPARTITION_TOPIC=g1-repartition"],
             ["--window 5m", "--repartition-topic g1-rep2"]),
            (["--group", "g1", "--window", "5m"], [:], ["this run asks for --window 5m"], ["repartition topic is"]),
            (["--group", "g1", "--repartition-topic", "g1-rep2"], [:], ["this run asks for --repartition-topic g1-rep2"], ["windows of"]),
            (["--group", "g1", "--state-topic", "g1-state2"], [:], ["this run asks for --state-topic g1-state2"], ["windows of"]),
            (["--group", "g1", "--input-keyed-by-delivery"], [:], ["it runs two stages", "one stage (--input-keyed-by-delivery)"], []),
            (["--group", "g1"], ["TRACKPIPE_INPUT_KEYED_BY_DELIVERY": "true"], ["one stage (TRACKPIPE_INPUT_KEYED_BY_DELIVERY=true)"], []),
            // Another input topic, whose partitions the group never committed: its aggregate
            // stage's commits on the repartition topic still say what it is fixed to.
            (["--group", "g1", "--input-topic", "hits-b", "--window", "5m"], [:],
             ["its aggregate stage's commit on g1-repartition", "this run asks for --window 5m"], []),
        ]
        for way in ways {
            let refused = try run(broker, way.arguments, environment: way.environment)
            let label = "\(way.arguments) \(way.environment)"
            #expect(refused.exitCode == 64, "\(label): \(refused.stderr)")
            for phrase in way.says { #expect(refused.stderr.contains(phrase), "\(label): \(phrase) in \(refused.stderr)") }
            for phrase in way.never { #expect(!refused.stderr.contains(phrase), "\(label): \(phrase) in \(refused.stderr)") }
            #expect(refused.stdout.isEmpty, "\(label): nothing ran, so no summary")
        }
        #expect(try ends(broker, topics) == written, "a refused run wrote records")
        #expect(
            try [
                commits(broker, group: "g1", topic: "hits"), commits(broker, group: "g1-aggregate", topic: "g1-repartition"),
                commits(broker, group: "g1-aggregate", topic: "g1-rep2"), commits(broker, group: "g1", topic: "hits-b"),
            ] == committed, "a refused run committed")

        // The group's own pipeline goes on: every hit, the 1,000 in between included.
        let again = try run(broker, ["--group", "g1", "--output-topic", "aggregates"])
        #expect(again.exitCode == 0, "\(again.stderr)")
        let problems = try contents(broker).mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")

        // The remedy the refusal gives: a new group and a new output topic count the other size.
        let fresh = try run(broker, ["--group", "g5", "--window", "5m", "--output-topic", "new5"])
        #expect(fresh.exitCode == 0, "\(fresh.stderr)")
        let fives = try contents(broker, output: "new5").mismatches(against: corpus.expected(windowSize: 5 * Self.minute))
        #expect(fives.isEmpty, "\(fives.count) keys differ, e.g. \(fives.prefix(3))")
    }

    @Test("another group pointed at this group's repartition or state topic exits 64 naming the group that writes it, and writes and commits nothing")
    func anotherGroupOnTheInternalTopics() throws {
        let broker = try makeBroker(also: ["out2"])
        let corpus = Corpus(HitStream(HitStreamConfig(count: 1_000, seed: 403, deliveries: 4)).generate())
        try corpus.produce(0..<600, to: "hits", on: broker)
        let first = try run(broker, ["--group", "g1", "--output-topic", "aggregates"])
        try #require(first.exitCode == 0, "\(first.stderr)")
        try corpus.produce(600..<1_000, to: "hits", on: broker)
        let topics = ["hits", "aggregates", "dlq", "g1-repartition", "g1-state", "out2"]
        let written = try ends(broker, topics)

        let ways: [(arguments: [String], environment: [String: String], says: [String])] = [
            (["--group", "g2", "--repartition-topic", "g1-repartition", "--output-topic", "out2"], [:],
             ["the repartition topic g1-repartition holds records that group g1's normalize stage wrote", "this run is group g2",
              "(--repartition-topic g1-repartition now", "or run it as --group g1"]),
            (["--group", "g2", "--state-topic", "g1-state", "--output-topic", "out2"], [:],
             ["the state topic g1-state holds the windows of group g1", "(--state-topic g1-state now"]),
            (["--group", "g2", "--output-topic", "out2"], ["TRACKPIPE_STATE_TOPIC": "g1-state"], ["(TRACKPIPE_STATE_TOPIC=g1-state now"]),
            // One stage, the input windowed directly, its state in g1's state topic.
            (["--group", "g2", "--input-keyed-by-delivery", "--state-topic", "g1-state", "--output-topic", "out2"], [:],
             ["the state topic g1-state holds the windows of group g1"]),
        ]
        for way in ways {
            let refused = try run(broker, way.arguments, environment: way.environment)
            let label = "\(way.arguments) \(way.environment)"
            #expect(refused.exitCode == 64, "\(label): \(refused.stderr)")
            for phrase in way.says { #expect(refused.stderr.contains(phrase), "\(label): \(phrase) in \(refused.stderr)") }
        }
        #expect(try ends(broker, topics) == written, "a refused run wrote records")
        for (group, topic) in [("g2", "hits"), ("g2-aggregate", "g1-repartition")] {
            #expect(try commits(broker, group: group, topic: topic).allSatisfy { $0.hasPrefix("-") }, "\(group) committed on \(topic)")
        }
        // g1 goes on, its counts whole.
        let again = try run(broker, ["--group", "g1", "--output-topic", "aggregates"])
        #expect(again.exitCode == 0, "\(again.stderr)")
        let problems = try contents(broker).mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
    }

    @Test("refusals that a restart cannot mend exit 64: a state topic whose partition count is not the input's; one stage on another input topic under a group, told by the group's state topic, which it leaves as it was, and the group's own pipeline then goes on exact")
    func refusalsExit64() throws {
        let broker = try makeBroker()
        try broker.createTopic("s2", partitions: 2)
        // One stage counts its input as it is keyed: one partition holds every delivery whole.
        for topic in ["one-a", "one-b", "g4-state"] { try broker.createTopic(topic, partitions: 1) }
        let corpus = Corpus(HitStream(HitStreamConfig(count: 300, seed: 404, deliveries: 4)).generate())
        try corpus.produce(0..<200, to: "hits", on: broker)
        let mismatched = try run(broker, ["--group", "g3", "--input-keyed-by-delivery", "--state-topic", "s2", "--output-topic", "aggregates"])
        #expect(mismatched.exitCode == 64, "\(mismatched.stderr)")
        #expect(mismatched.stderr.contains("the state topic s2 has 2 partitions, but the window tasks' input has 4"), "\(mismatched.stderr)")

        let own = ["--group", "g4", "--input-keyed-by-delivery", "--output-topic", "aggregates"]
        try corpus.produce(0..<200, to: "one-a", on: broker)
        try corpus.produce(0..<200, to: "one-b", on: broker)
        let first = try run(broker, own + ["--input-topic", "one-a"])
        try #require(first.exitCode == 0, "\(first.stderr)")
        let written = try ends(broker, ["aggregates", "dlq"])
        let other = try run(broker, own + ["--input-topic", "one-b"])
        #expect(other.exitCode == 64, "\(other.stderr)")
        #expect(other.stderr.contains("the state topic g4-state holds windows group g4 counted from another input than this run's"), "\(other.stderr)")
        #expect(try ends(broker, ["aggregates", "dlq"]) == written, "the refused run wrote records")

        try corpus.produce(200..<300, to: "one-a", on: broker)
        let again = try run(broker, own + ["--input-topic", "one-a"])
        #expect(again.exitCode == 0, "\(again.stderr)")
        let problems = try contents(broker).mismatches(against: corpus.expected(windowSize: Self.minute))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
    }

    /// Appends `values` (nil: a tombstone) to one partition of `topic`.
    func append(_ values: [[UInt8]?], to topic: String, partition: Int32, on broker: EmbeddedBroker) throws {
        let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "log_level": "3", "linger.ms": "5"]))
        for (index, value) in values.enumerated() {
            try producer.send(topic: topic, partition: partition, key: Array("tail-\(index)".utf8), value: value)
        }
        try producer.flush(timeoutMilliseconds: SafetyDeadline.milliseconds)
    }

    @Test("a 5m run or replay into a 1m topic whose every partition ends in a tombstone or a record that is not an aggregate exits 64 and writes nothing; a partition that cannot be told within 100 offsets is refused unless --allow-unchecked-output")
    func outputEndingInTombstonesAndJunk() throws {
        let broker = try makeBroker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 1_000, seed: 404, deliveries: 6)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let first = try run(broker, ["--group", "g1", "--output-topic", "aggregates"])
        try #require(first.exitCode == 0, "\(first.stderr)")
        let junk = Array("{\"note\":\"written by someone else\"}".utf8)
        for partition in Int32(0)..<4 {
            // Newest: a tombstone in even partitions, junk in odd ones, the other just before.
            try append(partition % 2 == 0 ? [junk, Array("not json".utf8), nil] : [nil, nil, junk], to: "aggregates", partition: partition, on: broker)
        }
        let topics = ["hits", "aggregates", "dlq"]
        let written = try ends(broker, topics)

        let binary = try TrackpipeBinary.locate()
        let replay = ["replay", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--log-level", "warning"]
        let refusals: [(String, TrackpipeBinary.Result, String)] = [
            ("run", try run(broker, ["--group", "g5", "--window", "5m", "--output-topic", "aggregates"]), "--window 5m"),
            ("replay", try binary.run(replay + ["--window", "5m"]), "--window 5m"),
            ("replay by variable", try binary.run(replay, environment: ["TRACKPIPE_WINDOW": "5m"]), "TRACKPIPE_WINDOW=5m"),
        ]
        for (name, refused, label) in refusals {
            #expect(refused.exitCode == 64, "\(name): \(refused.stderr)")
            #expect(refused.stderr.contains("the output topic aggregates holds windows of 1m (the newest aggregate record of aggregates["), "\(name): \(refused.stderr)")
            #expect(refused.stderr.contains("this run writes windows of \(label)") && refused.stderr.contains("new --output-topic"), "\(name): \(refused.stderr)")
        }
        #expect(try ends(broker, topics) == written, "a refused run or replay wrote records")
        #expect(try commits(broker, group: "g5", topic: "hits").allSatisfy { $0.hasPrefix("-") }, "the refused run committed")

        // Partition 0's newest 100 offsets hold no aggregate: which size is behind them cannot be told.
        try append(Array(repeating: nil, count: 60) + Array(repeating: junk, count: 40), to: "aggregates", partition: 0, on: broker)
        let unsure = try binary.run(replay + ["--window", "1m"])
        #expect(unsure.exitCode == 64, "\(unsure.stderr)")
        #expect(
            unsure.stderr.contains("the output topic aggregates cannot be checked for windows of another size: the newest 100 offsets of aggregates[0] hold no aggregate record (60 tombstones, 40 other records)"),
            "\(unsure.stderr)")
        #expect(unsure.stderr.contains("--allow-unchecked-output"))
        let before = try ends(broker, topics)
        let vouched = try binary.run(replay + ["--window", "1m", "--allow-unchecked-output"])
        #expect(vouched.exitCode == 0, "\(vouched.stderr)")
        #expect(vouched.stderr.contains("writing into the output topic aggregates unchecked (--allow-unchecked-output)"), "\(vouched.stderr)")
        #expect(try ends(broker, topics)["aggregates"] != before["aggregates"], "the vouched replay wrote its records")
    }
}

/// How the command line tells the pipeline the way each setting a group is fixed to was given.
@Suite("trackpipe run and replay: how each fixed setting was given")
struct GivenSettingTests {
    @Test("each setting a group is fixed to, by flag, by variable, or by default", arguments: [
        (["--window", "5m"], [String: String](), GroupIdentity.Setting.window, "--window 5m"),
        ([], ["TRACKPIPE_WINDOW": "300s"], .window, "TRACKPIPE_WINDOW=300s"),
        (["--window", "2m"], ["TRACKPIPE_WINDOW": "5m"], .window, "--window 2m"),
        ([], [:], .window, "--window (default 1m)"),
        (["--repartition-topic", "shuffle"], [:], .repartitionTopic, "--repartition-topic shuffle"),
        ([], ["TRACKPIPE_REPARTITION_TOPIC": "shuffle"], .repartitionTopic, "TRACKPIPE_REPARTITION_TOPIC=shuffle"),
        (["--group", "g7"], [:], .repartitionTopic, "--repartition-topic (default g7-repartition)"),
        (["--state-topic", "kept"], [:], .stateTopic, "--state-topic kept"),
        ([], ["TRACKPIPE_STATE_TOPIC": "kept"], .stateTopic, "TRACKPIPE_STATE_TOPIC=kept"),
        ([], ["TRACKPIPE_GROUP": "g8"], .stateTopic, "--state-topic (default g8-state)"),
        (["--input-keyed-by-delivery"], [:], .inputKeyedByDelivery, "--input-keyed-by-delivery"),
        ([], ["TRACKPIPE_INPUT_KEYED_BY_DELIVERY": "on"], .inputKeyedByDelivery, "TRACKPIPE_INPUT_KEYED_BY_DELIVERY=on"),
        ([], [:], .inputKeyedByDelivery, "--input-keyed-by-delivery (default false)"),
    ])
    func runGiven(_ arguments: [String], _ environment: [String: String], _ setting: GroupIdentity.Setting, _ label: String) throws {
        let run = try RunCommand.parse(arguments).resolve(Environment(environment))
        #expect(run.config.given[setting]?.label == label)
        #expect(Set(run.config.given.keys) == Set(GroupIdentity.Setting.allCases), "every setting is told")
    }

    @Test("replay tells the output check how --window was given; --allow-unchecked-output by flag or variable, in run and replay")
    func replayGiven() throws {
        #expect(try ReplayCommand.parse([]).resolve(Environment(["TRACKPIPE_WINDOW": "5m"])).config.given[.window]?.label == "TRACKPIPE_WINDOW=5m")
        #expect(try ReplayCommand.parse(["--window", "5m"]).resolve(Environment([:])).config.given[.window]?.label == "--window 5m")
        #expect(try ReplayCommand.parse([]).resolve(Environment([:])).config.allowUncheckedOutput == false)
        #expect(try ReplayCommand.parse(["--allow-unchecked-output"]).resolve(Environment([:])).config.allowUncheckedOutput)
        #expect(try ReplayCommand.parse([]).resolve(Environment(["TRACKPIPE_ALLOW_UNCHECKED_OUTPUT": "true"])).config.allowUncheckedOutput)
        #expect(try RunCommand.parse([]).resolve(Environment([:])).config.allowUncheckedOutput == false)
        #expect(try RunCommand.parse(["--allow-unchecked-output"]).resolve(Environment([:])).config.allowUncheckedOutput)
        #expect(try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_ALLOW_UNCHECKED_OUTPUT": "1"])).config.allowUncheckedOutput)
        #expect(throws: (any Error).self) { try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_ALLOW_UNCHECKED_OUTPUT": "maybe"])) }
    }

    @Test("a window setting refused by replay is named as given, as run names it")
    func replayNamesWindowSettingsAsGiven() {
        #expect {
            try ReplayCommand.parse([]).resolve(Environment(["TRACKPIPE_WINDOW": "0s"]))
        } throws: { error in
            "\(error)".contains("TRACKPIPE_WINDOW=0s: the window size must be longer than 0") && !"\(error)".contains("--window")
        }
        #expect {
            try ReplayCommand.parse(["--grace", "2h"]).resolve(Environment([:]))
        } throws: { error in
            "\(error)".contains("--retention (default 1h), --grace 2h: the retention must be at least the grace period")
        }
    }

    @Test("an internal topic's name that Kafka would refuse is a configuration error before any broker is asked, named as given")
    func badInternalTopicName() throws {
        let result = try TrackpipeBinary.locate().run(["run", "--brokers", "127.0.0.1:1"], environment: ["TRACKPIPE_STATE_TOPIC": "my state"])
        #expect(result.exitCode == 64)
        #expect(result.stderr.contains("TRACKPIPE_STATE_TOPIC=my state: not a Kafka topic name"), "\(result.stderr)")
    }
}
