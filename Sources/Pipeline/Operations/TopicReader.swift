import Kafka
import Logging

/// The one consumer a run of checks asks its questions through: each partition's log bounds,
/// and the commits of its own group and of any other (`committed(by:)`), on topics it reads
/// without joining a group. It is made at the first question, and closed by whoever made the
/// reader.
///
/// Why one: every client librdkafka makes opens a connection to each broker it learns of (with
/// a TLS or SASL handshake where the cluster asks for one) and costs the worker about 2 ms of
/// CPU. Asked each through a client of its own, the start-up's checks made five clients for two
/// stages and three for one stage (uprobes on `rd_kafka_new`).
///
/// Reading records is not asked through it: each round of `NewestRecords.read` still makes a
/// consumer of its own, so that an end-of-partition event of one round is never taken for the
/// next round's.
package final class TopicReader {
    /// The consumer's settings: the group whose commits it is asked for, and how it connects.
    package let config: KafkaConfig
    package let clients: any KafkaClientFactory
    package let logger: Logger
    private var made: (any ConsumerClient)?

    package init(config: KafkaConfig, clients: any KafkaClientFactory, logger: Logger) {
        (self.config, self.clients, self.logger) = (config, clients, logger)
    }

    deinit { made?.close() }

    /// The reader's consumer, made at the first question.
    package func consumer() throws -> any ConsumerClient {
        if let made { return made }
        let consumer = try newConsumer()
        made = consumer
        return consumer
    }

    /// A consumer of the reader's settings that joins no group, for the caller to own and close
    /// (a read round of `NewestRecords.read`).
    package func newConsumer() throws -> any ConsumerClient {
        try clients.consumer(config: config, logger: logger, rebalance: nil, maxBatch: 4_096, wakesFetcher: false, onError: nil)
    }

    /// Closes the consumer, if one was made; a later question makes another.
    package func close() {
        made?.close()
        made = nil
    }

    /// `body` with a reader of these settings, closed when it returns or throws: what it asks
    /// holds no connection open past it.
    package static func using<R>(
        config: KafkaConfig, clients: any KafkaClientFactory, logger: Logger, _ body: (TopicReader) throws -> R
    ) rethrows -> R {
        let reader = TopicReader(config: config, clients: clients, logger: logger)
        defer { reader.close() }
        return try body(reader)
    }

    /// `body` with a reader of `pipeline`'s group (`--group`), which asks the aggregate group's
    /// commits too (`committed(by:)`): the worker's start-up checks and `trackpipe status`.
    package static func using<R>(groupOf pipeline: PipelineConfig, logger: Logger, _ body: (TopicReader) throws -> R) rethrows -> R {
        try using(
            config: pipeline.consumerConfig(group: pipeline.group), clients: LibrdkafkaClients(), logger: logger.with(label: "trackpipe.kafka.consumer"),
            body)
    }
}
