import Foundation
@testable import Kafka
import Logging
import Synchronization
import Testing
import TrackpipeTestSupport

@Suite("Kafka under faults and rebalances", .serialized)
struct KafkaFaultTests {
    @Test("a wrong property or value fails at once with an error that names it")
    func badProperty() throws {
        do {
            _ = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": "localhost:9092", "no.such.property": "1"]))
            Issue.record("an unknown property was accepted")
        } catch let error as KafkaError {
            #expect(error.kind == .invalidProperty(name: "no.such.property", value: "(value hidden)"))
            #expect(error.message.contains("no.such.property"))
            #expect(error.message.contains("unknown property"))
        }
        do {
            _ = try KafkaConsumer(config: KafkaConfig(["group.id": "g", "session.timeout.ms": "banana"]))
            Issue.record("an invalid value was accepted")
        } catch let error as KafkaError {
            #expect(error.message.contains("session.timeout.ms=banana"))
            #expect(error.message.contains("invalid value"))
        }
        // A known secret with a bad value, and misspelt secrets: named, their values never shown.
        do {
            _ = try KafkaProducer(config: KafkaConfig(["ssl.key.password": "hunter2", "sasl.oauthbearer.client.secret": "x", "acks": "maybe"]))
        } catch let error as KafkaError {
            #expect(!error.message.contains("hunter2"))
        }
        for name in ["sasl.pasword", "ssl.keystore.passwrd.x", "sasl.oauthbearer.client.secret.x"] {
            do {
                _ = try KafkaProducer(config: KafkaConfig([name: "hunter2-\(name)"]))
                Issue.record("\(name) was accepted")
            } catch let error as KafkaError {
                #expect(error.message.contains(name))
                #expect(!error.message.contains("hunter2"), "\(error.message)")
                #expect(!"\(error.kind)".contains("hunter2"))
            }
        }
    }

    @Test("two members of one group split the partitions, and a leaving member's partitions are handed over")
    func rebalanceHandsPartitionsOver() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("split", partitions: 6)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        for i in 0..<600 { try producer.send(topic: "split", partition: Int32(i % 6), key: nil, value: Array("\(i)".utf8)) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)

        let revokedFromA = Mutex<[TopicPartition]>([])
        let a = try KafkaConsumer(
            config: KafkaTestSupport.consumerConfig(broker, group: "split-group"),
            rebalance: RebalanceHandler(partitionsRevoking: { parts in revokedFromA.withLock { $0 += parts } }))
        let b = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "split-group"))
        try a.subscribe(topics: ["split"])
        try b.subscribe(topics: ["split"])

        var fromA = Set<Int32>()
        var fromB = Set<Int32>()
        let deadline = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while Date() < deadline {
            a.poll(timeoutMilliseconds: 50) { if case .record(let r) = $0 { fromA.insert(r.partition) } }
            b.poll(timeoutMilliseconds: 50) { if case .record(let r) = $0 { fromB.insert(r.partition) } }
            let assignedA = Set(try a.assignment().map(\.partition))
            let assignedB = Set(try b.assignment().map(\.partition))
            if assignedA.count == 3 && assignedB.count == 3 && fromA.count + fromB.count >= 6 { break }
        }
        let assignedA = Set(try a.assignment().map(\.partition))
        let assignedB = Set(try b.assignment().map(\.partition))
        #expect(assignedA.count == 3)
        #expect(assignedB.count == 3)
        #expect(assignedA.isDisjoint(with: assignedB))
        #expect(assignedA.union(assignedB) == Set(0..<6))

        // A leaves: its revoke hook runs first, then B takes every partition.
        a.close()
        #expect(Set(revokedFromA.withLock { $0 }.map(\.partition)) == assignedA)
        let handover = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while Date() < handover {
            b.poll(timeoutMilliseconds: 100) { _ in }
            if try b.assignment().count == 6 { break }
        }
        #expect(Set(try b.assignment().map(\.partition)) == Set(0..<6))
        b.close()
    }

    @Test("a broker down for a few seconds: the producer delivers everything and the consumer carries on")
    func brokerDownThenUp() throws {
        let broker = try EmbeddedBroker(brokers: 1)
        try broker.createTopic("outage", partitions: 2)
        let errors = ClientErrors()
        let (producer, deliveries) = try KafkaTestSupport.makeProducer(
            broker, extra: ["message.timeout.ms": "\(KafkaTestSupport.safetyMilliseconds)", "reconnect.backoff.max.ms": "500"],
            errors: errors)
        let consumer = try KafkaConsumer(
            config: KafkaTestSupport.consumerConfig(broker, group: "outage-group", extra: ["reconnect.backoff.max.ms": "500"]))
        try consumer.subscribe(topics: ["outage"])

        var values = Set<String>()
        for i in 0..<500 { try producer.send(topic: "outage", key: nil, value: Array("\(i)".utf8)) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        KafkaTestSupport.pollUntil(consumer, { values.insert(String(decoding: $0.value!, as: UTF8.self)) }, stop: { values.count == 500 })
        #expect(values.count == 500)

        let errorsBefore = errors.count
        try broker.setBrokerDown(1)
        for i in 500..<1000 { try producer.send(topic: "outage", key: nil, value: Array("\(i)".utf8)) }
        // Down until the producer has tried and failed to reach it: it reports the broker gone.
        let deadline = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while errors.count == errorsBefore && Date() < deadline {
            producer.poll(timeoutMilliseconds: 100)
            consumer.poll(timeoutMilliseconds: 100) { _ in }
        }
        #expect(errors.count > errorsBefore, "the producer never reported the broker down")
        #expect(deliveries.delivered == 500, "nothing can be acknowledged while the only broker is down")
        try broker.setBrokerUp(1)
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        #expect(deliveries.delivered == 1000)
        #expect(deliveries.failures.isEmpty)
        KafkaTestSupport.pollUntil(consumer, { values.insert(String(decoding: $0.value!, as: UTF8.self)) }, stop: { values.count == 1000 })
        #expect(values.count == 1000)
        consumer.close()
    }

    @Test("request errors injected on Produce are retried and nothing is lost")
    func injectedProduceErrors() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("flaky", partitions: 1)
        broker.failNextRequests(.produce, with: Array(repeating: KafkaErrorCode.notEnoughReplicas, count: 4))
        let (producer, deliveries) = try KafkaTestSupport.makeProducer(broker, extra: ["retry.backoff.ms": "10"])
        for i in 0..<200 { try producer.send(topic: "flaky", partition: 0, key: nil, value: Array("\(i)".utf8)) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        #expect(deliveries.delivered == 200)
        #expect(deliveries.failures.isEmpty)
        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "flaky-group"))
        let marks = try consumer.watermarks(TopicPartition(topic: "flaky", partition: 0))
        #expect(marks.high == 200)
    }

    @Test("a full local queue makes send wait instead of dropping")
    func backpressureNeverDrops() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("tight", partitions: 1)
        try broker.setRoundTripTime(1, milliseconds: 20)
        let (producer, deliveries) = try KafkaTestSupport.makeProducer(
            broker, extra: ["queue.buffering.max.messages": "100", "linger.ms": "1"])
        for i in 0..<3000 { try producer.send(topic: "tight", partition: 0, key: nil, value: Array("\(i)".utf8), token: UInt64(i)) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        #expect(deliveries.delivered == 3000)
        #expect(deliveries.failures.isEmpty)
    }

    /// A consumer's logger that keeps what it logs, at every level.
    static func capturing() -> (Logger, CapturedLogs) {
        let logs = CapturedLogs()
        var logger = Logger(label: "trackpipe.kafka.consumer") { _ in CapturingHandler(sink: logs) }
        logger.logLevel = .trace
        return (logger, logs)
    }

    static func leftUndestroyed(_ logs: CapturedLogs) -> Bool {
        logs.entries.withLock { $0.contains { $0.message.contains("left undestroyed") } }
    }

    @Test("a consumer released after its group answered its join but before any assignment does not abort the process")
    func releasedBeforeTheFirstAssignment() throws {
        // librdkafka before 2.3.0 asserts in its cooperative-sticky assignor when a consumer is
        // destroyed between a JoinGroup answer and its first assignment (librdkafka #4312): a
        // worker stopped, or a pipeline given up, while its group's coordinator was failing
        // took the whole process down with SIGABRT. Every SyncGroup fails here, so the consumer
        // joins again and again and never gets an assignment.
        let broker = try EmbeddedBroker()
        try broker.createTopic("unassigned", partitions: 2)
        try broker.setGroupCoordinator("unassigned-group", brokerId: 1)
        let errors = 10_000
        try broker.failNextRequests(.syncGroup, on: 1, with: KafkaErrorCode.rebalanceInProgress, count: errors)
        let (logger, logs) = Self.capturing()
        do {
            let consumer = try KafkaConsumer(
                config: KafkaTestSupport.consumerConfig(
                    broker, group: "unassigned-group", extra: ["partition.assignment.strategy": "cooperative-sticky"]),
                logger: logger)
            try consumer.subscribe(topics: ["unassigned"])
            // A SyncGroup request arrives only after a JoinGroup the coordinator answered.
            let synced = KafkaTestSupport.pollUntil(consumer, { _ in }) {
                ((try? broker.injectedErrorsLeft(.syncGroup, on: 1)) ?? errors) < errors
            }
            #expect(synced, "the consumer never asked for its assignment")
            #expect(try consumer.assignment().isEmpty)
        }
        // The consumer was released at the end of the block above: the process is still here,
        // and only a librdkafka that would have aborted kept the client.
        #expect(Self.leftUndestroyed(logs) == (Librdkafka.versionNumber < Librdkafka.nullAssignorStateVersion))
    }

    @Test("every consumer that cannot have a join without an assignment is destroyed: one that only assigns, one that was assigned, one of another assignor")
    func otherConsumersAreDestroyed() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("destroyed", partitions: 2)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        for i in 0..<4 { try producer.send(topic: "destroyed", partition: Int32(i % 2), key: nil, value: Array("\(i)".utf8)) }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        let cooperative = ["partition.assignment.strategy": "cooperative-sticky"]

        // With a group and the cooperative assignor, but partitions taken by hand: it never
        // joins, however long it reads (the state restorer's and the tools' consumers).
        let (assigningLogger, assigning) = Self.capturing()
        do {
            let consumer = try KafkaConsumer(
                config: KafkaTestSupport.consumerConfig(broker, group: "assigning", extra: cooperative), logger: assigningLogger)
            try consumer.assign([TopicPartitionOffset(TopicPartition(topic: "destroyed", partition: 0), offset: 0)])
            var read = 0
            #expect(KafkaTestSupport.pollUntil(consumer, { _ in read += 1 }) { read == 2 })
        }
        #expect(!Self.leftUndestroyed(assigning), "a consumer that never subscribed was kept")

        // Subscribed and assigned: its assignor has its state.
        let (assignedLogger, assigned) = Self.capturing()
        do {
            let consumer = try KafkaConsumer(
                config: KafkaTestSupport.consumerConfig(broker, group: "assigned", extra: cooperative), logger: assignedLogger)
            try consumer.subscribe(topics: ["destroyed"])
            var read = 0
            #expect(KafkaTestSupport.pollUntil(consumer, { _ in read += 1 }) { read == 4 })
        }
        #expect(!Self.leftUndestroyed(assigned), "a consumer that was assigned its partitions was kept")

        // Subscribed with an eager assignor, whose state librdkafka never asserts on.
        let (eagerLogger, eager) = Self.capturing()
        try broker.setGroupCoordinator("eager", brokerId: 1)
        try broker.failNextRequests(.syncGroup, on: 1, with: KafkaErrorCode.rebalanceInProgress, count: 10_000)
        do {
            let consumer = try KafkaConsumer(
                config: KafkaTestSupport.consumerConfig(broker, group: "eager", extra: ["partition.assignment.strategy": "range"]),
                logger: eagerLogger)
            try consumer.subscribe(topics: ["destroyed"])
            #expect(KafkaTestSupport.pollUntil(consumer, { _ in }) { ((try? broker.injectedErrorsLeft(.syncGroup, on: 1)) ?? 0) < 10_000 })
        }
        #expect(!Self.leftUndestroyed(eager), "a consumer of an eager assignor was kept")
    }
}
