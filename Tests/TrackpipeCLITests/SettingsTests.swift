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
}
