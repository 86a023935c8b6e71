import CRdKafka
import Logging

/// A Kafka cluster inside this process, speaking the real protocol on loopback: librdkafka's
/// mock cluster. It lets tests, benchmarks and the demo run without a Kafka server, and lets
/// the soak benchmark and the tests break the cluster on purpose (brokers down, latency; the
/// tests' request errors are in TrackpipeTestSupport).
///
/// Its limits are librdkafka's: each partition keeps only its newest few megabytes, topics
/// are created here (`createTopic`; not by CreateTopics requests), transactions have no real
/// semantics.
public final class EmbeddedBroker: @unchecked Sendable {
    // @unchecked: only `let`s; the mock cluster functions it calls either post a command to the
    // cluster's own thread or take the cluster's lock, so any thread may call them.
    private let handle: OpaquePointer
    /// librdkafka's mock cluster, for the fault injection the tests add (TrackpipeTestSupport).
    package let cluster: OpaquePointer
    private let context: Unmanaged<ClientContext>
    public let brokerCount: Int
    /// `host:port,...` for `bootstrap.servers`.
    public let bootstrapServers: String

    public init(brokers: Int = 1, logger: Logger = Logger(label: "trackpipe.embedded-broker")) throws {
        precondition(brokers >= 1, "an embedded cluster needs at least one broker")
        // The mock cluster lives on a client handle of its own that never talks to it.
        let ctx = ClientContext(logger: logger)
        (handle, context) = try makeNativeClient(
            type: RD_KAFKA_PRODUCER, config: KafkaConfig(["log_level": "3"]), context: ctx)
        guard let cluster = rd_kafka_mock_cluster_new(handle, Int32(brokers)) else {
            rd_kafka_destroy(handle)
            context.release()
            throw KafkaError(.embeddedBroker, "librdkafka could not start an embedded cluster of \(brokers) brokers")
        }
        guard let bootstraps = rd_kafka_mock_cluster_bootstraps(cluster) else {
            rd_kafka_mock_cluster_destroy(cluster)
            rd_kafka_destroy(handle)
            context.release()
            throw KafkaError(.embeddedBroker, "librdkafka started an embedded cluster but gave no address for it")
        }
        self.cluster = cluster
        self.brokerCount = brokers
        self.bootstrapServers = String(cString: bootstraps)
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(handle)
        context.release()
    }

    /// Creates a topic. This is the only way topics come to be on every librdkafka version:
    /// 2.0.2's embedded broker also creates unknown topics (4 partitions) when a client asks for
    /// their metadata, later ones (2.16 measured) do not, and none answers CreateTopics.
    /// - Parameter ifMissing: a topic of that name that exists already (whatever its partition
    ///   count) is left alone instead of being an error.
    public func createTopic(_ name: String, partitions: Int, replicationFactor: Int = 1, ifMissing: Bool = false) throws {
        let err = rd_kafka_mock_topic_create(cluster, name, Int32(partitions), Int32(min(replicationFactor, brokerCount)))
        if ifMissing && err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS { return }
        if err.isError { throw KafkaError.from(err, "creating topic \(name) on the embedded broker") }
    }
}
