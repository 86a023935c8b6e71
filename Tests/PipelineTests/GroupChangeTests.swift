import HitGenerator
import Kafka
import Pipeline
import Testing
import TrackingDomain
import TrackpipeTestSupport
import Windowing

/// What an operator changes under a running group, end to end on the embedded broker: the input
/// topic, and the mode.
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
            #expect("\(error)".contains("normalize stage") && "\(error)".contains("--group"), "\(error)")
        }
        let now = try TestTopics.contents(broker)
        #expect(now.outputRecords == written.outputRecords, "records were written")
    }
}
