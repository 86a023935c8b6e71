import Foundation
import HitGenerator
import Kafka
import Pipeline
import RecordFormats
import Testing
import TrackingDomain
import TrackpipeTestSupport
@testable import TrackpipeCLI

@Suite("trackpipe run: flags and environment")
struct RunCommandResolutionTests {
    func resolve(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ResolvedRun {
        try RunCommand.parse(arguments).resolve(Environment(environment))
    }

    /// What `run` says of these arguments: its refusal, as the command prints it, or "accepted".
    func message(_ arguments: [String], _ environment: [String: String] = [:]) -> String {
        do {
            _ = try resolve(arguments, environment)
            return "accepted"
        } catch {
            return RunCommand.message(for: error)
        }
    }

    @Test("defaults match the documented ones")
    func defaults() throws {
        let run = try resolve([])
        #expect(run.config.brokers == "localhost:9092")
        #expect(run.config.inputTopic == "tracking-hits")
        #expect(run.config.outputTopics[0] == "tracking-aggregates")
        #expect(run.config.deadLetterTopic == "tracking-hits-dlq")
        #expect(run.config.group == "trackpipe")
        #expect(run.config.window.lengths[0] == 60_000)
        #expect(run.config.window.sizes[0].grace == 10_000)
        #expect(run.config.window.retention == 3_600_000)
        #expect(run.config.window.idleTimeout == 30_000)
        #expect(run.config.shards == ProcessInfo.processInfo.activeProcessorCount)
        #expect(run.config.untilEnd == false)
        #expect(run.metricsPort == 0)
        #expect(run.config.effectiveRepartitionTopic == "trackpipe-repartition")
        #expect(run.config.aggregateGroup == "trackpipe-aggregate")
        #expect(run.config.inputKeyedByDelivery == false)
    }

    @Test("every flag falls back to TRACKPIPE_<FLAG>, and the command line wins over the environment")
    func environmentFallback() throws {
        let environment = [
            "TRACKPIPE_BROKERS": "k1:9092,k2:9092", "TRACKPIPE_INPUT_TOPIC": "in", "TRACKPIPE_OUTPUT_TOPIC": "out",
            "TRACKPIPE_DLQ_TOPIC": "dead", "TRACKPIPE_GROUP": "g", "TRACKPIPE_WINDOW": "5m", "TRACKPIPE_GRACE": "500ms",
            "TRACKPIPE_RETENTION": "2h", "TRACKPIPE_IDLE_TIMEOUT": "1m30s", "TRACKPIPE_SHARDS": "3", "TRACKPIPE_UNTIL_END": "true",
            "TRACKPIPE_METRICS_PORT": "9464", "TRACKPIPE_MAX_ENTRIES": "1000", "TRACKPIPE_COMMIT_INTERVAL": "1s",
            "TRACKPIPE_LOG_LEVEL": "debug", "TRACKPIPE_LOG_FORMAT": "json",
            "TRACKPIPE_REPARTITION_TOPIC": "shuffle", "TRACKPIPE_INPUT_KEYED_BY_DELIVERY": "yes",
            "TRACKPIPE_X": "security.protocol=SASL_SSL;sasl.mechanisms=PLAIN;linger.ms=7",
            "TRACKPIPE_X_PASSWORD": "sasl.password=s3cr=t", "TRACKPIPE_X_USERNAME": "sasl.username=u",
        ]
        let run = try resolve([], environment)
        #expect(run.config.brokers == "k1:9092,k2:9092")
        #expect(run.config.inputTopic == "in")
        #expect(run.config.outputTopics[0] == "out")
        #expect(run.config.deadLetterTopic == "dead")
        #expect(run.config.group == "g")
        #expect(run.config.window.lengths[0] == 300_000)
        #expect(run.config.window.sizes[0].grace == 500)
        #expect(run.config.window.retention == 7_200_000)
        #expect(run.config.window.idleTimeout == 90_000)
        #expect(run.config.shards == 3)
        #expect(run.config.untilEnd)
        #expect(run.config.effectiveRepartitionTopic == "shuffle")
        #expect(run.config.inputKeyedByDelivery)
        #expect(run.metricsPort == 9464)
        #expect(run.config.window.maxEntries == 1000)
        #expect(run.config.commitInterval == 1000)
        #expect(run.logLevel == .debug)
        #expect(run.logFormat == .json)
        #expect(run.config.kafkaProperties["security.protocol"] == "SASL_SSL")
        #expect(run.config.kafkaProperties["sasl.mechanisms"] == "PLAIN")
        #expect(run.config.kafkaProperties["sasl.password"] == "s3cr=t")

        // (A property parse can check without the test's environment: parsing checks -X alone.)
        let overridden = try resolve(["--brokers", "cli:1", "--window", "30s", "-X", "linger.ms=9"], environment)
        #expect(overridden.config.brokers == "cli:1")
        #expect(overridden.config.window.lengths[0] == 30_000)
        #expect(overridden.config.kafkaProperties["linger.ms"] == "9")
        #expect(overridden.config.kafkaProperties["sasl.mechanisms"] == "PLAIN")
    }

    @Test("every flag that reads the environment is a real flag of trackpipe run")
    func environmentFlagsAreFlags() throws {
        let help = RunCommand.helpMessage()
        for flag in RunCommand.environmentFlags where flag != "x" {
            #expect(help.contains("--\(flag)"), "--\(flag)")
        }
    }

    @Test("bad values are refused with a message that says what to write")
    func refusals() throws {
        #expect(throws: (any Error).self) { try resolve(["--window", "60"]) }
        do {
            _ = try resolve([], ["TRACKPIPE_GRACE": "soon"])
            Issue.record("accepted a bad duration")
        } catch {
            #expect("\(error)".contains("500ms, 10s, 1m"))
        }
        do {
            _ = try resolve(["-X", "novalue"])
            Issue.record("accepted -X without =")
        } catch {
            #expect("\(error)".contains("expected key=value"))
        }
        do {
            _ = try resolve([], ["TRACKPIPE_SHARDS": "many"])
            Issue.record("accepted a non-number")
        } catch {
            #expect("\(error)".contains("TRACKPIPE_SHARDS=many"))
        }
        #expect(throws: (any Error).self) { try resolve(["-X", "enable.auto.commit=true"]) }
        for bad in ["on-ish", "garbage", "2"] {
            do {
                _ = try resolve([], ["TRACKPIPE_UNTIL_END": bad])
                Issue.record("TRACKPIPE_UNTIL_END=\(bad) accepted")
            } catch {
                #expect("\(error)".contains("TRACKPIPE_UNTIL_END=\(bad): expected true or false"))
            }
        }
        #expect(throws: (any Error).self) { try resolve(["--repartition-topic", "tracking-aggregates"]) }
        #expect(message(["--brokers", ""]).contains("--brokers : give at least one bootstrap address"))
        #expect(message(["--brokers", " , "]).contains("give at least one bootstrap address"))
        #expect(message(["--shards", "100000"]).contains("--shards 100000: use 1 to 1024"))
        #expect(message(["--shards", "0"]).contains("use 1 to 1024"))
        #expect(message(["--commit-interval", "0s"]).contains("--commit-interval 0s: must be longer than 0"))
        #expect(message(["--grace", "-5s"]).contains("--grace -5s: durations cannot be negative"))
        #expect(message([], ["TRACKPIPE_RETENTION": "5s"]) == "TRACKPIPE_RETENTION=5s, --grace (default 10s): the retention must be at least the grace period: a window is kept until it is emitted")
        #expect(message(["--window", "0s"]).hasPrefix("--window 0s: "), "names only the flag involved")
        #expect(message([], ["TRACKPIPE_LOG_LEVEL": "loud"]).hasPrefix("TRACKPIPE_LOG_LEVEL=loud: "))
        #expect(throws: (any Error).self) { try resolve(["--retention", "1s", "--grace", "10s"]) }
    }

    @Test("several sizes: --grace, --emit and --output-topic follow --window's order whatever it is, and every way to give two sizes one topic, one size twice, or a list of the wrong length is refused naming where it came from")
    func severalSizes() throws {
        let run = try resolve(["--window", "1h,1m", "--grace", "1s,2s", "--emit", "final,changes", "--output-topic", "hours,minutes"])
        #expect(run.config.window.lengths == [60_000, 3_600_000], "kept ascending")
        #expect(run.config.window.sizes.map(\.grace) == [2_000, 1_000] && run.config.window.sizes.map(\.emission) == [.changes, .final])
        #expect(run.config.outputTopics == ["minutes", "hours"], "each topic stays with its size")
        #expect(run.config.identity.windowSizes == [60_000, 3_600_000])
        let one = try resolve(["--window", "1m,1h", "--grace", "5s", "--output-topic", " a , b "])
        #expect(one.config.window.sizes.map(\.grace) == [5_000, 5_000] && one.config.outputTopics == ["a", "b"])
        let twoTopics = ["--output-topic", "a,b"]
        #expect(message(["--window", "1m,1m"] + twoTopics).contains("each window size may be named once"))
        #expect(message(["--window", "60s,1m"] + twoTopics).contains("each window size may be named once"), "one size written two ways")
        #expect(message(["--window", "1m,1h", "--output-topic", "a,a"]).contains("--output-topic a,a: name a topic of its own for each window size"))
        #expect(message(["--window", "1m,1h", "--output-topic", "a"]).contains("--output-topic a: name a topic of its own for each window size"))
        #expect(message(["--window", "1m,1h"]).contains("--output-topic (default tracking-aggregates): name a topic of its own"), "the default topic for two sizes")
        #expect(message([], ["TRACKPIPE_OUTPUT_TOPIC": "a,b"]).contains("TRACKPIPE_OUTPUT_TOPIC=a,b: name a topic of its own"), "two topics for the one size, from the environment")
        #expect(message(["--window", "1m,1h", "--output-topic", "a,"]).contains("--output-topic a,: "), "an empty name")
        #expect(message(["--window", "1m,1h", "--output-topic", "a,b,c"]).contains("name a topic of its own"))
        #expect(message(["--window", "1m,1h", "--output-topic", "tracking-hits,b"]).contains("must differ from the output and dead-letter topics"), "the input among the outputs")
        #expect(message(["--window", "1m,1h", "--output-topic", "a,tracking-hits-dlq"]).contains("the dead-letter topic tracking-hits-dlq must differ from the output topics"), "the dead-letter topic among the outputs")
        #expect(message(["--output-topic", "dead", "--dlq-topic", "dead"]).contains("the dead-letter topic dead must differ from the output topics"), "one size too")
        #expect(message(["--window", "1m,"] + twoTopics).hasPrefix("--window 1m,: "))
        #expect(message(["--window", "1m,1h", "--grace", "1s,2s,3s"] + twoTopics).contains("--grace 1s,2s,3s: give one value for every window size, or one per size of --window (2)"))
        #expect(message(["--emit", "final,changes"]).contains("--emit final,changes: give one value for every window size"))
        #expect(message(["--window", "1m,1h", "--emit", "final,sometimes"] + twoTopics).contains("--emit final,sometimes: say changes"))
        #expect(message(["--window", "1m,1h", "--grace", "1s,2h"] + twoTopics).contains("the retention must be at least the grace period"), "one size's grace past the retention")
    }

    @Test("durations read like people write them")
    func durations() throws {
        #expect(try DurationText.milliseconds("500ms") == 500)
        #expect(try DurationText.milliseconds("10s") == 10_000)
        #expect(try DurationText.milliseconds("1m") == 60_000)
        #expect(try DurationText.milliseconds("1h") == 3_600_000)
        #expect(try DurationText.milliseconds("1h30m") == 5_400_000)
        #expect(try DurationText.milliseconds("1d") == 86_400_000)
        for bad in ["", "10", "m", "10x", "-5s", "1.5h"] {
            #expect(throws: DurationError.self) { try DurationText.milliseconds(bad) }
        }
    }
}

@Suite("trackpipe run against the embedded broker", .serialized)
struct RunCommandEndToEndTests {
    static let minute: Int64 = 60_000

    func workerArguments(_ broker: EmbeddedBroker, group: String, sizes: WindowSizes = .one("1m", minute)) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits",
            "--dlq-topic", "dlq", "--group", group, "--shards", "2", "--commit-interval", "200ms", "--log-level", "warning",
            // The embedded broker holds a rejoin for about the session timeout; real brokers do not.
            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ] + sizes.flags
    }

    func makeBroker(sizes: WindowSizes = .one("1m", minute)) throws -> EmbeddedBroker {
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 8)
        try sizes.createTopics(on: broker)
        try broker.createTopic("dlq", partitions: 2)
        return broker
    }

    /// How many input messages the group has committed as processed: the normalize stage
    /// commits what it processed once its records are acknowledged.
    func processedTotal(_ broker: EmbeddedBroker, group: String) throws -> Int64 {
        // Reading a group's commits does not join the group.
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": group, "log_level": "3"]))
        let partitions = (0..<8).map { TopicPartition(topic: "hits", partition: Int32($0)) }
        return try reader.committed(partitions).map { max(0, $0.offset) }.reduce(0, +)
    }

    @Test("SIGTERM: the worker commits its safe offsets, prints its summary and exits 0")
    func gracefulStop() throws {
        let broker = try makeBroker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 3_000, seed: 2, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let worker = try BackgroundTrackpipe(TrackpipeBinary.locate(), workerArguments(broker, group: "term"))
        let consumedAll = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try processedTotal(broker, group: "term") == 3_000 }
        #expect(consumedAll, "nothing committed; stderr: \(worker.stderr)")
        worker.signal(SIGTERM)
        #expect(worker.waitForExit(seconds: SafetyDeadline.seconds) == 0, "stderr: \(worker.stderr)")
        #expect(worker.stdout.contains("consumed      3000 messages"))
        #expect(worker.stdout.contains("balanced      yes"))
    }

    @Test("the input topic deleted while running: exit 1, naming the topic and what to do, without hanging")
    func inputTopicDeleted() throws {
        let broker = try makeBroker()
        try broker.createTopic("gone-repartition", partitions: 8)
        try broker.createTopic("gone-state", partitions: 8)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 500, seed: 3, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(), workerArguments(broker, group: "gone") + ["-X", "topic.metadata.refresh.interval.ms=1000"])
        let consumedAll = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try processedTotal(broker, group: "gone") == 500 }
        #expect(consumedAll, "stderr: \(worker.stderr)")
        broker.setTopicError("hits", code: KafkaErrorCode.unknownTopicOrPartition)
        let code = worker.waitForExit(seconds: SafetyDeadline.seconds)
        if code == nil { worker.signal(SIGKILL) }
        #expect(code == 1, "stderr: \(worker.stderr.suffix(2_000))")
        #expect(worker.stderr.contains("trackpipe run: normalize: the topic hits no longer exists on the cluster"))
        #expect(worker.stderr.contains("Recreate the topic"))
        #expect(try processedTotal(broker, group: "gone") == 500, "nothing committed beyond what was processed")
    }

    @Test(
        "SIGKILL in the middle of a stream, then a restart with --until-end: the last record per key is exact (of 1m,1h,1d from one pipeline, each size against its own reference) and no dead letter is missing",
        arguments: [WindowSizes.one("1m", minute), .three])
    func killedMidStream(_ sizes: WindowSizes) throws {
        let broker = try makeBroker(sizes: sizes)
        // Two hours of event time, so windows are finalized and evicted while the worker runs.
        let corpus = Corpus(HitStream(HitStreamConfig(count: 16_000, seed: 21, deliveries: 6, span: 120 * Self.minute)).generate())
        try corpus.produce(0..<8_000, to: "hits", on: broker)
        let binary = try TrackpipeBinary.locate()
        let worker = try BackgroundTrackpipe(binary, workerArguments(broker, group: "kill", sizes: sizes))
        let committed = try BackgroundTrackpipe.waitUntil(seconds: SafetyDeadline.seconds) { try processedTotal(broker, group: "kill") > 0 }
        #expect(committed, "the worker never committed; stderr: \(worker.stderr)")
        // More input arrives while it runs; kill it without warning part-way through. Where the
        // kill lands does not matter (the pause only makes a kill mid-batch likely): every check
        // below holds wherever it lands.
        try corpus.produce(8_000..<16_000, to: "hits", on: broker)
        usleep(150_000)
        worker.signal(SIGKILL)
        let killed = worker.waitForExit(seconds: SafetyDeadline.seconds)
        try #require(killed != nil, "still running after SIGKILL")
        #expect(killed == SIGKILL || worker.process.terminationReason == .uncaughtSignal)

        let restart = try binary.run(workerArguments(broker, group: "kill", sizes: sizes) + ["--until-end"])
        #expect(restart.exitCode == 0, "\(restart.stderr)")
        #expect(restart.stdout.contains("balanced      yes"))

        let outs = try sizes.contents(broker)
        let out = outs[0]
        let problems = sizes.mismatches(outs, against: corpus)
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")

        // Every bad message is in the dead-letter topic (a message processed after the last
        // commit may appear twice: dead letters are at least once); nothing else is.
        var lettered = Set<String>()
        for letter in out.deadLetters {
            let context = try #require(DeadLetter(headers: letter.headers))
            let hit = try #require(corpus.hit(partition: context.sourcePartition, offset: context.sourceOffset))
            #expect(hit.truth == .rejected(context.reason))
            #expect(letter.value == hit.value)
            lettered.insert("\(context.sourcePartition)@\(context.sourceOffset)")
        }
        let bad = corpus.hits.filter { if case .rejected = $0.truth { true } else { false } }.count
        #expect(lettered.count == bad)
    }
}
