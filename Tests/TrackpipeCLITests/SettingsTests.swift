import ArgumentParser
import Foundation
import Testing
@testable import Pipeline
@testable import TrackpipeCLI

/// The helpers every command reads its settings through: durations, environment fallbacks and
/// librdkafka properties, with errors that say what to fix and where.
@Suite("settings: durations, environment, -X")
struct SettingsTests {
    func message(_ body: () throws -> Any) -> String? {
        do {
            _ = try body()
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("a negative duration is refused as negative, not as unreadable")
    func negativeDuration() {
        #expect(throws: DurationError(text: "-5s", problem: .negative)) { try DurationText.milliseconds("-5s") }
        #expect(message { try DurationText.milliseconds(" -1h") } == "' -1h': durations cannot be negative; write a number with a unit, like 500ms, 10s, 1m, 1h or 1h30m")
    }

    @Test("a bare number is refused with both readings offered; other mistakes say how to write one")
    func otherDurationMistakes() {
        #expect(message { try DurationText.milliseconds("60") } == "'60': a number without a unit; write 60s or 60ms (a bare number could mean either)")
        #expect(message { try DurationText.milliseconds("") } == "'': empty; write a number with a unit, like 500ms, 10s, 1m, 1h or 1h30m")
        #expect(message { try DurationText.milliseconds("1.5h") } == "'1.5h': not a duration; write a number with a unit, like 500ms, 10s, 1m, 1h or 1h30m")
        #expect(throws: DurationError(text: "99999999999999999999s", problem: .tooLong)) { try DurationText.milliseconds("99999999999999999999s") }
    }

    @Test("a sum beyond Int64 is refused instead of trapping")
    func overflowingSum() {
        #expect(throws: DurationError(text: "9000000000000000000ms9000000000000000000ms", problem: .tooLong)) {
            try DurationText.milliseconds("9000000000000000000ms9000000000000000000ms")
        }
    }

    @Test("a bad duration names the variable when it came from the environment, the flag when typed")
    func durationErrorsNameTheirSource() throws {
        let environment = Environment(["TRACKPIPE_GRACE": "-5s", "TRACKPIPE_WINDOW": "5m"])
        #expect(
            message { try environment.duration("grace", nil, default: "10s") }
                == "TRACKPIPE_GRACE=-5s: durations cannot be negative; write a number with a unit, like 500ms, 10s, 1m, 1h or 1h30m")
        #expect(message { try environment.duration("grace", "soon", default: "10s") }?.hasPrefix("--grace soon: not a duration;") == true)
        #expect(try environment.duration("window", nil, default: "1m") == 300_000)
        #expect(try environment.duration("window", "30s", default: "1m") == 30_000)
        #expect(try environment.duration("retention", nil, default: "1h") == 3_600_000)
        #expect(environment.setting("window", nil, default: "1m").label == "TRACKPIPE_WINDOW=5m")
        #expect(environment.setting("retention", nil, default: "1h").label == "--retention (default 1h)")
    }

    @Test("whole numbers and switches from the environment are refused with the variable's name")
    func integersAndSwitches() throws {
        let environment = Environment(["TRACKPIPE_SHARDS": "many", "TRACKPIPE_UNTIL_END": "ture", "TRACKPIPE_ON": "Yes", "TRACKPIPE_OFF": "0"])
        #expect(message { try environment.integer("shards", nil, default: 2) } == "TRACKPIPE_SHARDS=many: expected a whole number")
        #expect(try environment.integer("shards", 4, default: 2) == 4)
        #expect(try environment.integer("max-entries", nil, default: 7) == 7)
        #expect(message { try environment.switch("until-end", false) } == "TRACKPIPE_UNTIL_END=ture: expected true or false (or 1/0, yes/no, on/off)")
        #expect(try environment.switch("until-end", true))
        #expect(try environment.switch("on", false))
        #expect(try !environment.switch("off", false))
        #expect(try !environment.switch("unset", false))
    }

    @Test("-X with an empty value says the value is empty; from the environment it names the variable and hides the value")
    func emptyPropertyValue() throws {
        #expect(
            message { try KafkaPropertyArguments.parse(["sasl.password="]) }
                == "-X sasl.password=: the value is empty; write -X sasl.password=VALUE, or leave the property out to keep librdkafka's default")
        let environment = Environment(["TRACKPIPE_X_PASSWORD": "sasl.password=", "TRACKPIPE_X_USER": "hunter2"])
        let pairs = environment.kafkaPropertyPairs()
        #expect(
            message { try KafkaPropertyArguments.parse(pairs: [pairs[0]]) }
                == "TRACKPIPE_X_PASSWORD: the value of sasl.password is empty; set sasl.password=VALUE, or remove the variable to keep librdkafka's default")
        let noEquals = message { try KafkaPropertyArguments.parse(pairs: [pairs[1]]) }
        #expect(noEquals?.hasPrefix("TRACKPIPE_X_USER: expected key=value") == true)
        #expect(noEquals?.contains("hunter2") == false, "a value from the environment may be a secret")
        #expect(message { try KafkaPropertyArguments.parse(["=x"]) } == "-X =x: expected key=value, for example -X security.protocol=SASL_SSL")
        #expect(try KafkaPropertyArguments.parse(["a=b=c", " linger.ms =5"]) == ["a": "b=c", "linger.ms": "5"])
    }

    @Test("an unknown TRACKPIPE_* variable is refused with the closest known one; TRACKPIPE_X_<ANY> and every command's variables are known")
    func unknownVariables() throws {
        #expect(Environment.editDistance("TRACKPIPE_BROKER", "TRACKPIPE_BROKERS") == 1)
        #expect(Environment.editDistance("kitten", "sitting") == 3)
        #expect(Environment.editDistance("", "abc") == 3 && Environment.editDistance("abc", "") == 3 && Environment.editDistance("", "") == 0)
        let problem = try #require(Environment(["TRACKPIPE_BROKER": "secret-host:9092", "PATH": "/bin"]).unknownVariableProblem())
        #expect(problem.hasPrefix("unknown environment variable TRACKPIPE_BROKER: did you mean TRACKPIPE_BROKERS?"), "\(problem)")
        #expect(!problem.contains("secret-host"), "the value may be a secret")
        #expect(Environment(["TRACKPIPE_GRACE_PERIOD": "10s"]).unknownVariableProblem()?.contains("did you mean TRACKPIPE_GRACE?") == true)
        #expect(Environment(["TRACKPIPE_UNTILEND": "1"]).unknownVariableProblem()?.contains("did you mean TRACKPIPE_UNTIL_END?") == true)
        #expect(Environment(["TRACKPIPE_X_SASL_PASSWORD": "sasl.password=p", "TRACKPIPE_X": "acks=all"]).unknownVariableProblem() == nil)
        // Variables of run, replay and status, and those only the tests and scripts read.
        let everything = Dictionary(uniqueKeysWithValues: (Environment.knownVariables.union(Environment.toolVariables)).map { ($0, "x") })
        #expect(Environment(everything).unknownVariableProblem() == nil)
        #expect(Environment.knownVariables.isSuperset(of: ["TRACKPIPE_METRICS_PORT", "TRACKPIPE_OUTPUT_TOPIC", "TRACKPIPE_X", "TRACKPIPE_CONNECT_TIMEOUT"]))
        #expect(throws: (any Error).self) { try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_BROKER": "kafka:9092"])) }
        #expect(throws: (any Error).self) { try StatusCommand.parse([]).resolve(Environment(["TRACKPIPE_GROUPS": "g"])) }
        #expect(throws: (any Error).self) { try ReplayCommand.parse([]).resolve(Environment(["TRACKPIPE_FROM": "beginning"])) }
    }

    @Test("each instance's clients are named after its host unless -X client.id says otherwise")
    func clientIdNamesTheInstance() throws {
        #expect(PipelineConfig.defaultClientId(host: "trackpipe-7d9f8-x2x4q") == "trackpipe-trackpipe-7d9f8-x2x4q")
        #expect(PipelineConfig.defaultClientId(host: "") == "trackpipe")
        #expect(PipelineConfig.defaultClientId(host: "host name/é") == "trackpipe-host-name--")
        let host = RunCommand.hostName()
        #expect(!host.isEmpty)
        let config = try RunCommand.parse([]).resolve(Environment([:])).config
        #expect(config.clientId == PipelineConfig.defaultClientId(host: host))
        for built in [config.consumerConfig(group: "g", member: "normalize"), config.producerConfig, config.adminConfig] {
            #expect(built["client.id"] == config.clientId)
        }
        let named = try RunCommand.parse(["-X", "client.id=mine"]).resolve(Environment([:])).config
        #expect(named.consumerConfig(group: "g")["client.id"] == "mine" && named.producerConfig["client.id"] == "mine")
        let fromVariable = try RunCommand.parse([]).resolve(Environment(["TRACKPIPE_X_CLIENT_ID": "client.id=trackpipe-1"])).config
        #expect(fromVariable.adminConfig["client.id"] == "trackpipe-1")
    }

    @Test("TRACKPIPE_X lists and TRACKPIPE_X_<ANY> variables keep their order and origin")
    func environmentPairs() {
        let environment = Environment(["TRACKPIPE_X": "a=1; b=2\n", "TRACKPIPE_X_Z": " z=3 ", "TRACKPIPE_X_A": "y=4"])
        #expect(
            environment.kafkaPropertyPairs() == [
                .init("a=1", origin: .environment("TRACKPIPE_X")), .init("b=2", origin: .environment("TRACKPIPE_X")),
                .init("y=4", origin: .environment("TRACKPIPE_X_A")), .init("z=3", origin: .environment("TRACKPIPE_X_Z")),
            ])
        #expect(environment.kafkaProperties() == ["a=1", "b=2", "y=4", "z=3"])
    }

    // MARK: Values the command line overrides

    /// For every flag that reads `TRACKPIPE_<FLAG>`: a value it refuses and one it takes (nil:
    /// a switch, given bare).
    static let samples: [String: (bad: String, good: String?)] = [
        "brokers": (" , ", "k:9092"), "input-topic": ("tracking hits", "in"), "output-topic": ("out/put", "out"),
        "dlq-topic": ("dlq!", "dead"), "group": ("my group", "g"), "repartition-topic": ("re partition", "rep"),
        "state-topic": ("st ate", "st"), "input-keyed-by-delivery": ("ture", nil), "window": ("banana", "1m"),
        "grace": ("-5s", "5s"), "retention": ("soon", "2h"), "idle-timeout": ("0s", "30s"), "emit": ("sometimes", "final"),
        "shards": ("many", "2"), "until-end": ("ture", nil), "connect-timeout": ("0s", "1m"), "allow-lost-input": ("maybe", nil), "allow-unchecked-output": ("maybe", nil),
        "instance-id": ("pod 0", "pod-0"), "metrics-port": ("70000", "0"), "max-entries": ("lots", "1000"),
        "commit-interval": ("0s", "1s"), "purge-interval": ("often", "30s"), "max-future-skew": ("-1h", "1h"), "max-headers": ("-1", "64"),
        "progress-interval": ("often", "10s"), "unhealthy-after": ("0s", "60s"), "log-level": ("loud", "info"), "log-format": ("xml", "text"),
    ]

    static let environmentReaders: [(command: String, flags: [String], help: String)] = [
        ("run", RunCommand.environmentFlags, RunCommand.helpMessage(columns: 10_000)),
        ("replay", ReplayCommand.environmentFlags, ReplayCommand.helpMessage(columns: 10_000)),
        ("status", StatusCommand.environmentFlags, StatusCommand.helpMessage(columns: 10_000)),
    ]

    /// Every (command, flag) that reads the environment, but `-X` (its variables add to it, and
    /// are checked as they are).
    static let overridable: [(String, String)] = environmentReaders.flatMap { reader in
        reader.flags.filter { $0 != "x" }.map { (reader.command, $0) }
    }

    /// `nil` when the command takes the settings, the message otherwise.
    static func refusal(_ command: String, _ arguments: [String], _ environment: [String: String]) -> String? {
        do {
            switch command {
            case "run": _ = try RunCommand.parse(arguments).resolve(Environment(environment))
            case "replay": _ = try ReplayCommand.parse(arguments).resolve(Environment(environment))
            default: _ = try StatusCommand.parse(arguments).resolve(Environment(environment))
            }
            return nil
        } catch {
            // A bad command line fails in `parse` already (its `validate` resolves too).
            return RunCommand.message(for: error)
        }
    }

    @Test(
        "a value in the environment is checked even where the command line sets the same flag: refused, naming the variable and saying the command line overrides it; every flag of run, replay and status",
        arguments: overridable)
    func overriddenValuesAreChecked(command: String, flag: String) throws {
        let sample = try #require(Self.samples[flag], "no sample values for --\(flag): add a value it refuses and one it takes")
        let variable = Environment.variableName(forFlag: flag)
        let commandLine = sample.good.map { ["--\(flag)", $0] } ?? ["--\(flag)"]
        let hasFlag = Self.environmentReaders.first { $0.command == command }!.help.contains("--\(flag)")
        // The control: the good value either way is taken; the bad one alone is refused.
        #expect(Self.refusal(command, hasFlag ? commandLine : [], [variable: sample.good ?? "true"]) == nil)
        let alone = try #require(Self.refusal(command, [], [variable: sample.bad]), "\(command): \(variable)=\(sample.bad) taken")
        #expect(alone.contains(variable), "\(command): \(alone)")
        guard hasFlag else { return }  // status has no --log-format: its variable is always read
        let overridden = try #require(
            Self.refusal(command, commandLine, [variable: sample.bad]),
            "\(command) \(commandLine.joined(separator: " ")) with \(variable)=\(sample.bad) in the environment was taken")
        #expect(overridden.contains(variable), "\(command): names the variable: \(overridden)")
        #expect(
            overridden.hasSuffix(
                "(\(variable) in the environment: --\(flag) on the command line overrides it, but a value in the environment is checked all the same; correct it or unset it)"),
            "\(command): \(overridden)")
    }

    @Test("the environment's values are checked together, as a deployment sets them: two that agree pass, whatever the command line says")
    func overriddenValuesTogether() {
        // grace 2h and retention 3h agree; so do the command line's 5s and 1h.
        let environment = ["TRACKPIPE_GRACE": "2h", "TRACKPIPE_RETENTION": "3h"]
        #expect(Self.refusal("run", ["--grace", "5s", "--retention", "1h"], environment) == nil)
        // A retention shorter than the environment's grace is refused, naming both.
        let both = Self.refusal("run", ["--grace", "5s", "--retention", "1h"], ["TRACKPIPE_GRACE": "2h"])
        #expect(both?.contains("TRACKPIPE_GRACE=2h") == true && both?.contains("(TRACKPIPE_GRACE in the environment: --grace on the command line overrides it") == true, "\(both ?? "taken")")
        // The issue's example.
        #expect(Self.refusal("run", ["--window", "1m"], ["TRACKPIPE_WINDOW": "banana"])?.hasPrefix("TRACKPIPE_WINDOW=banana: ") == true)
        // Two overridden at once: both named.
        let two = Self.refusal("replay", ["--window", "1m", "--shards", "2"], ["TRACKPIPE_WINDOW": "banana", "TRACKPIPE_SHARDS": "2"])
        #expect(two?.contains("(TRACKPIPE_WINDOW in the environment: --window on the command line overrides it") == true, "\(two ?? "taken")")
    }

    @Test("topic names are checked as Kafka checks them, and so are the internal topics' names a group makes")
    func topicNames() {
        #expect(Environment.topicNameProblem("tracking-hits.v2_a") == nil)
        #expect(Environment.topicNameProblem(String(repeating: "t", count: 249)) == nil)
        for bad in ["", ".", "..", "a b", "a/b", "é", String(repeating: "t", count: 250), "a:b"] {
            #expect(Environment.topicNameProblem(bad) != nil, "\(bad)")
        }
        #expect(Self.refusal("run", ["--input-topic", "hits now"], [:]) == "--input-topic hits now: not a Kafka topic name; use 1 to 249 letters, digits, '.', '_' and '-' (and not . or ..)")
        #expect(
            Self.refusal("run", ["--group", "team:x"], [:])
                == "--group team:x: the --repartition-topic it names, team:x-repartition, is not a Kafka topic name; use 1 to 249 letters, digits, '.', '_' and '-' (and not . or ..); change the group or give --repartition-topic")
        #expect(Self.refusal("run", ["--group", "team:x", "--repartition-topic", "rep", "--state-topic", "st"], [:]) == nil, "named topics need no name from the group")
        #expect(Self.refusal("run", ["--group", "team:x", "--input-keyed-by-delivery"], [:])?.contains("--state-topic it names, team:x-state") == true)
        #expect(Self.refusal("status", [], ["TRACKPIPE_GROUP": "team x"])?.hasPrefix("TRACKPIPE_GROUP=team x: the --repartition-topic it names") == true)
        #expect(Self.refusal("replay", ["--dlq-topic", "dead letters"], [:])?.hasPrefix("--dlq-topic dead letters: not a Kafka topic name") == true)
    }

    @Test("a variable named after a flag that has none is told so, not pointed at a look-alike; every flag of every command has a variable or is listed as having none")
    func flagsWithoutVariables() throws {
        let timings = try #require(Environment(["TRACKPIPE_TIMINGS": "true"]).unknownVariableProblem())
        #expect(
            timings
                == "environment variable TRACKPIPE_TIMINGS: --timings (trackpipe run) has no environment variable; it is set only on the command line, as trackpipe run --timings. Remove TRACKPIPE_TIMINGS")
        #expect(!timings.contains("did you mean"))
        #expect(Environment(["TRACKPIPE_FROM": "x"]).unknownVariableProblem()?.contains("--from (trackpipe replay) has no environment variable") == true)
        #expect(Environment(["TRACKPIPE_TOPIC": "x"]).unknownVariableProblem()?.contains("--topic (trackpipe generate, trackpipe embedded-broker)") == true)
        #expect(Environment(["TRACKPIPE_JSON": "1"]).unknownVariableProblem()?.contains("as trackpipe status --json.") == true)
        #expect(Environment(["TRACKPIPE_TIMING": "1"]).unknownVariableProblem()?.contains("did you mean") == true, "a misspelling is still one")
        // The table is complete: each flag of each command reads a variable or is listed.
        let commands: [(String, String, [String])] = [
            ("run", RunCommand.helpMessage(columns: 10_000), RunCommand.environmentFlags),
            ("replay", ReplayCommand.helpMessage(columns: 10_000), ReplayCommand.environmentFlags),
            ("status", StatusCommand.helpMessage(columns: 10_000), StatusCommand.environmentFlags),
            ("generate", GenerateCommand.helpMessage(columns: 10_000), []),
            ("demo", DemoCommand.helpMessage(columns: 10_000), []),
            ("normalize", NormalizeCommand.helpMessage(columns: 10_000), []),
            ("embedded-broker", EmbeddedBrokerCommand.helpMessage(columns: 10_000), []),
        ]
        let listed = Dictionary(uniqueKeysWithValues: Environment.commandLineOnlyFlags.map { ($0.key, Set($0.value)) })
        for (command, help, variables) in commands {
            let flags = Set(help.matches(of: #/(?m)^\s+(?:-[A-Za-z], )?--([a-z][a-z-]*)/#).map { String($0.output.1) }).subtracting(["help", "version"])
            let covered = Set(variables).union(listed[command] ?? [])
            #expect(flags.subtracting(covered).isEmpty, "\(command): flags neither reading a variable nor listed in Environment.commandLineOnlyFlags: \(flags.subtracting(covered).sorted())")
            #expect((listed[command] ?? []).isSubset(of: flags), "\(command): listed flags it does not have: \((listed[command] ?? []).subtracting(flags).sorted())")
            #expect(Set(variables).intersection(listed[command] ?? []).isEmpty, "\(command): a flag both reads a variable and is listed as having none")
        }
    }
}
