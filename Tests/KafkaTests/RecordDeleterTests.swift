import CRdKafka
import Foundation
@testable import Kafka
import Logging
import Testing

/// DeleteRecords as the worker asks it (`RecordDeleter`, over a producer's client: a request that
/// returns at once, its answer collected later), against the embedded broker, which refuses it:
/// librdkafka's mock cluster does not list DeleteRecords among the requests it takes
/// (ApiVersions), so the client answers every partition `_UNSUPPORTED_FEATURE` (2.0.2 and 2.16
/// alike, measured). No broker here deletes records: what a purge does to a log is the simulated
/// cluster's (docs/simulation.md).
@Suite("DeleteRecords on the embedded broker")
struct RecordDeleterTests {
    @Test("the request is made and answered later, each partition refused as unsupported, and nothing is deleted")
    func refusedAsUnsupported() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("purged", partitions: 2)
        let (producer, deliveries) = try KafkaTestSupport.makeProducer(broker)
        for index in 0..<20 {
            try producer.send(topic: "purged", partition: Int32(index % 2), key: Array("key".utf8), value: Array("record \(index)".utf8))
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        #expect(deliveries.delivered == 20)

        // Asked through a producer's client, as the purge asks through its stage's; librdkafka's
        // own account of the request comes through that client's logger.
        let logs = CapturedLogs()
        let asking = try KafkaProducer(
            config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "debug": "admin"]),
            logger: Logger(label: "test.deleter") { _ in CapturingHandler(sink: logs) })
        let deleter = try asking.recordDeleter()
        #expect(deleter.answer(waitingMilliseconds: 0) == nil, "nothing asked, nothing to answer")
        let asked = [TopicPartitionOffset(topic: "purged", partition: 0, offset: 5), TopicPartitionOffset(topic: "purged", partition: 1, offset: 10)]
        try deleter.requestDeletion(below: asked, timeoutMilliseconds: 10_000)
        // The answer comes on the client's queue; waiting for it here is the test's choice.
        var answer: [RecordDeletion]?
        let deadline = Date().addingTimeInterval(KafkaTestSupport.safetySeconds)
        while answer == nil, Date() < deadline { answer = deleter.answer(waitingMilliseconds: 200) }
        let deletions = try #require(answer, "no answer to DeleteRecords")
        #expect(deletions.map(\.partition) == asked.map(\.topicPartition))
        #expect(deletions.map(\.below) == [5, 10])
        for deletion in deletions {
            guard case .failure(let error) = deletion.outcome else {
                Issue.record("\(deletion): the embedded broker deleted records")
                continue
            }
            #expect(error.kind == .unsupported, "\(error)")
            #expect(error.error.code == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE.rawValue, "\(error)")
            #expect(error.description.contains("_UNSUPPORTED_FEATURE"), "\(error)")
        }
        #expect(deleter.answer(waitingMilliseconds: 0) == nil, "one answer per request")
        // The request went to the partitions' leader, whose advertised requests (ApiVersions)
        // do not include DeleteRecords: the refusal is the broker's, as the client reads it.
        let said = logs.entries.withLock { $0.map(\.message) }
        // (librdkafka's debug lines, the same on 2.0.2 and 2.16; not a contract of its.)
        #expect(said.contains { $0.contains("DELETERECORDS") && $0.contains("broker 1") }, "\(said.suffix(10))")
        #expect(said.contains { $0.contains("DeleteRecords Admin API (KIP-107) not supported by broker") }, "\(said.suffix(10))")

        // The log still starts at 0.
        let reader = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "purge-reader"))
        let starts = try reader.beginningOffsets([TopicPartition(topic: "purged", partition: 0), TopicPartition(topic: "purged", partition: 1)])
        #expect(starts.map(\.offset) == [0, 0])
    }

    @Test("each refusal is sorted by what can be done about it: unsupported, not authorized, transient, other")
    func refusalKinds() {
        func kind(_ code: rd_kafka_resp_err_t) -> RecordDeletionError.Kind { RecordDeletionError(KafkaError.from(code, "deleting")).kind }
        // A cluster that does not do it: librdkafka's own check, a broker too old, a service that refuses the request.
        for code in [RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE, RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION, RD_KAFKA_RESP_ERR_INVALID_REQUEST] {
            #expect(kind(code) == .unsupported, "\(code)")
        }
        for code in [RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED] {
            #expect(kind(code) == .notAuthorized, "\(code)")
        }
        for code in [
            RD_KAFKA_RESP_ERR__TIMED_OUT, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ] {
            #expect(kind(code) == .transient, "\(code)")
        }
        // An offset past the partition's end (the topic recreated), a broker's policy.
        for code in [RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE, RD_KAFKA_RESP_ERR_POLICY_VIOLATION, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART] {
            #expect(kind(code) == .other, "\(code)")
        }
    }
}
