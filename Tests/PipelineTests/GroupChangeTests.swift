import HitGenerator
import Kafka
import Pipeline
import Runner
import Testing
import TrackingDomain
import TrackpipeTestSupport
import Windowing

/// What an operator changes under a running group, end to end on the embedded broker: the input
/// topic, the mode, and the window size.
@Suite("Changes under a group on the embedded broker", .serialized)
struct GroupChangeTests {
    static let minute: Int64 = 60_000

    func config(_ broker: EmbeddedBroker, group: String, input: String) -> PipelineConfig {
        var config = TestTopics.config(broker, group: group, window: WindowConfig(size: Self.minute), shards: 2)
        config.inputTopic = input
        config.untilEnd = true
        return config
    }

    func counted(_ corpora: [Corpus]) -> ReferenceAggregates {
        ReferenceAggregates(
            corpora.flatMap(\.hits).compactMap { if case .counted(let expected) = $0.truth { expected } else { nil } },
            windowSize: Self.minute)
    }

    @Test("another input topic under the same group: its hits are all counted (none taken for duplicates of the old topic's positions)")
    func inputTopicSwitched() throws {
        let broker = try TestTopics.broker()
        try broker.createTopic("hits-2", partitions: 8)
        let first = Corpus(HitStream(HitStreamConfig(count: 1_000, seed: 71, deliveries: 5)).generate())
        let second = Corpus(HitStream(HitStreamConfig(count: 200, seed: 72, deliveries: 3, deliverySeed: 9_072)).generate())
        try first.produce(0..<first.hits.count, to: "hits", on: broker)
        try second.produce(0..<second.hits.count, to: "hits-2", on: broker)

        let before = try Pipeline(config: config(broker, group: "switch", input: "hits")).run()
        #expect(before.accounting.balanced)
        let after = try Pipeline(config: config(broker, group: "switch", input: "hits-2")).run()
        let aggregate = after.stages[1].accounting
        #expect(aggregate.duplicates == 0, "the new topic's hits were dropped as duplicates")
        let problems = try TestTopics.contents(broker).mismatches(against: counted([first, second]))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
    }

    @Test("switching a two-stage group to --input-keyed-by-delivery is refused with the remedy, and overwrites nothing")
    func modeSwitchRefused() throws {
        // As many input partitions as the two-stage run's state topic gets on the embedded
        // broker (4), so that it is the group's commits that are refused, not the state topic.
        let broker = try TestTopics.broker(inputPartitions: 4)
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 73, deliveries: 6)).generate())
        try corpus.produce(0..<1_000, to: "hits", on: broker)
        _ = try Pipeline(config: config(broker, group: "modes", input: "hits")).run()
        let written = try TestTopics.contents(broker)
        try corpus.produce(1_000..<2_000, to: "hits", on: broker)

        var single = config(broker, group: "modes", input: "hits")
        single.inputKeyedByDelivery = true
        do {
            _ = try Pipeline(config: single).run()
            Issue.record("the one-stage run resumed from the two-stage group's commits")
        } catch {
            #expect("\(error)".contains("it runs two stages") && "\(error)".contains("one stage (--input-keyed-by-delivery)"), "\(error)")
            #expect("\(error)".contains("new --group"), "\(error)")
            #expect(PipelineError.exitCode(for: error) == 64, "a setting to change: \(error)")
        }
        let now = try TestTopics.contents(broker)
        #expect(now.outputRecords == written.outputRecords, "records were written")
    }

    @Test("the window size changed under a group is refused at start-up, naming both sizes and the remedies; nothing is written; the same size goes on")
    func windowSizeChangeRefused() throws {
        let broker = try TestTopics.broker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 74, deliveries: 5)).generate())
        try corpus.produce(0..<1_000, to: "hits", on: broker)
        _ = try Pipeline(config: config(broker, group: "sizes", input: "hits")).run()
        let written = try TestTopics.contents(broker)
        #expect(written.outputRecords > 0)
        try corpus.produce(1_000..<2_000, to: "hits", on: broker)

        var five = config(broker, group: "sizes", input: "hits")
        five.window = WindowConfig(size: 5 * Self.minute)
        do {
            _ = try Pipeline(config: five).run()
            Issue.record("a run of 5-minute windows went on from a group that counted 1-minute windows")
        } catch let error as PipelineError {
            guard case .settingChanged = error else {
                Issue.record("refused, but not as a changed setting: \(error)")
                return
            }
            let text = "\(error)"
            #expect(text.contains("it counts windows of 1m and this run asks for --window 5m"), "\(text)")
            #expect(text.contains("new --group") && text.contains("new --output-topic"), "\(text)")
        }
        let after = try TestTopics.contents(broker)
        #expect(after.outputRecords == written.outputRecords, "records were written")
        #expect(after.deadLetters.count == written.deadLetters.count, "dead letters were written")

        // The same size goes on, and the counts are whole.
        _ = try Pipeline(config: config(broker, group: "sizes", input: "hits")).run()
        let problems = try TestTopics.contents(broker).mismatches(against: counted([corpus]))
        #expect(problems.isEmpty, "\(problems.count) keys differ, e.g. \(problems.prefix(3))")
    }

    @Test("a new group of another window size writing into an output topic that holds 1-minute windows is refused before it writes")
    func outputTopicOfAnotherSizeRefused() throws {
        let broker = try TestTopics.broker()
        let corpus = Corpus(HitStream(HitStreamConfig(count: 600, seed: 75, deliveries: 4)).generate())
        try corpus.produce(0..<corpus.hits.count, to: "hits", on: broker)
        _ = try Pipeline(config: config(broker, group: "first-size", input: "hits")).run()
        let written = try TestTopics.contents(broker)

        var five = config(broker, group: "second-size", input: "hits")
        five.window = WindowConfig(size: 5 * Self.minute)
        #expect {
            _ = try Pipeline(config: five).run()
        } throws: { error in
            "\(error)".contains("the output topic aggregates holds windows of 1m") && "\(error)".contains("new --output-topic")
        }
        #expect(try TestTopics.contents(broker).outputRecords == written.outputRecords, "records were written")
    }
}
