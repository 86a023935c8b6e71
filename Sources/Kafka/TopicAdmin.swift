import CRdKafka
import Logging

/// The few cluster questions trackpipe asks: does a topic exist and with how many partitions,
/// and create one (its internal repartition topic) where the cluster allows.
public final class TopicAdmin: @unchecked Sendable {
    // @unchecked: the native handle is thread-safe for these calls (metadata and admin
    // requests each use their own reply queue); nothing else is mutable.
    /// The native handle, for the admin requests kept in files of their own (`TopicConfigs`).
    let client: OpaquePointer
    private let context: Unmanaged<ClientContext>

    public init(config: KafkaConfig, logger: Logger = Logger(label: "trackpipe.kafka.admin")) throws {
        (client, context) = try makeNativeClient(type: RD_KAFKA_PRODUCER, config: config, context: ClientContext(logger: logger))
    }

    deinit {
        rd_kafka_destroy(client)
        context.release()
    }

    /// Whether a broker answers a metadata request within the timeout: the cheapest question
    /// that tells "the cluster is reachable and lets us in".
    public func ping(timeoutMilliseconds: Int32 = 3_000) -> Bool {
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let err = rd_kafka_metadata(client, 0, nil, &metadata, timeoutMilliseconds)
        if let metadata { rd_kafka_metadata_destroy(metadata) }
        return !err.isError
    }

    /// The partition count of `topic`, or nil when the cluster says it does not exist. Throws
    /// when the cluster cannot be asked (unreachable, not authorized).
    public func partitionCount(of topic: String, timeoutMilliseconds: Int32 = 10_000) throws -> Int? {
        guard let handle = rd_kafka_topic_new(client, topic, nil) else {
            throw KafkaError(.clientCreation, "librdkafka could not make a handle for topic \(topic)")
        }
        defer { rd_kafka_topic_destroy(handle) }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let err = rd_kafka_metadata(client, 0, handle, &metadata, timeoutMilliseconds)
        defer { if let metadata { rd_kafka_metadata_destroy(metadata) } }
        if err.isError { throw KafkaError.from(err, "reading the metadata of \(topic)") }
        guard let metadata, metadata.pointee.topic_cnt > 0 else { return nil }
        let entry = metadata.pointee.topics[0]
        if entry.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || entry.err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC { return nil }
        if entry.err.isError { throw KafkaError.from(entry.err, "reading the metadata of \(topic)") }
        return entry.partition_cnt > 0 ? Int(entry.partition_cnt) : nil
    }

    /// Each topic's `max.message.bytes` (the largest record batch its brokers take), where the
    /// cluster says: a topic it does not describe (DescribeConfigs unsupported, not allowed, no
    /// controller to ask, as in librdkafka's mock cluster, or no answer within the timeout) is
    /// left out. Never throws: the answer only tightens a limit that has a default.
    public func maxMessageBytes(of topics: [String], timeoutMilliseconds: Int32 = 10_000) -> [String: Int] {
        topicConfigs(topics, timeoutMilliseconds: timeoutMilliseconds).described.compactMapValues { $0["max.message.bytes"].flatMap { Int($0) } }
    }

    /// Creates a topic through the Admin API (CreateTopics). A topic that already exists is
    /// not an error.
    public func createTopic(
        _ topic: String, partitions: Int, replicationFactor: Int = -1, config: [String: String] = [:],
        timeoutMilliseconds: Int32 = 30_000
    ) throws {
        var errstr = [CChar](repeating: 0, count: 512)
        guard let newTopic = rd_kafka_NewTopic_new(topic, Int32(partitions), Int32(replicationFactor), &errstr, errstr.count)
        else { throw KafkaError(.clientCreation, "creating topic \(topic): \(string(fromErrorBuffer: errstr))") }
        defer { rd_kafka_NewTopic_destroy(newTopic) }
        for (name, value) in config.sorted(by: { $0.key < $1.key }) {
            let err = rd_kafka_NewTopic_set_config(newTopic, name, value)
            if err.isError { throw KafkaError.from(err, "creating topic \(topic): config \(name)=\(value)") }
        }
        let client = client
        try adminRequest(
            on: client, RD_KAFKA_ADMIN_OP_CREATETOPICS, timeout: .operation(timeoutMilliseconds), margin: 5_000,
            send: { options, queue in
                var topics: [OpaquePointer?] = [newTopic]
                topics.withUnsafeMutableBufferPointer { rd_kafka_CreateTopics(client, $0.baseAddress, 1, options, queue) }
            },
            read: { event in
                guard let result = rd_kafka_event_CreateTopics_result(event) else { return }
                var count = 0
                guard let results = rd_kafka_CreateTopics_result_topics(result, &count) else { return }
                for index in 0..<count {
                    guard let topicResult = results[index] else { continue }
                    let err = rd_kafka_topic_result_error(topicResult)
                    if err.isError && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS {
                        throw KafkaError.from(err, "creating topic \(topic)", detail: string(from: rd_kafka_topic_result_error_string(topicResult), or: ""))
                    }
                }
            }
        ).mapError { $0.error("creating topic \(topic)") }.get()
    }
}
