import CRdKafka
import Logging

/// Deletes the records of partitions below given offsets (Kafka's DeleteRecords, KIP-107): the
/// partition's log start moves up to the offset, and the broker frees the segments below it.
/// What trackpipe deletes is its own repartition topic, up to what the aggregate group has
/// committed, as Kafka Streams purges its repartition topics after each commit.
///
/// A request returns at once and its answer is collected later: a stage runner asks after a
/// commit and looks for the answer at its next turns, so that a broker slow to answer never
/// holds its loop (or a rebalance) up.
public protocol RecordDeletionClient: AnyObject {
    /// Sends one request deleting every record of each partition below its offset; the answer
    /// comes from `answer`. Throws only when the request could not be made at all.
    func requestDeletion(below offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws
    /// The answer to a request, the first to come, waiting up to `waitingMilliseconds` for one
    /// (0: not at all); nil while none has come.
    func answer(waitingMilliseconds: Int32) -> [RecordDeletion]?
}

/// What the cluster made of a deletion for one partition.
public struct RecordDeletion: Sendable, Equatable, CustomStringConvertible {
    public var partition: TopicPartition
    /// The offset asked for: every record below it was to go.
    public var below: Int64
    /// The partition's log start after the deletion (its low watermark), or why nothing was deleted.
    public var outcome: Result<Int64, RecordDeletionError>

    public init(partition: TopicPartition, below: Int64, outcome: Result<Int64, RecordDeletionError>) {
        self.partition = partition
        self.below = below
        self.outcome = outcome
    }

    public var description: String {
        switch outcome {
        case .success(let start): "\(partition) below \(below): log start \(start)"
        case .failure(let error): "\(partition) below \(below): \(error)"
        }
    }
}

/// Why a deletion was refused, sorted by what the caller can do about it.
public struct RecordDeletionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The raw value is how the purge metric and log label the kind.
    public enum Kind: String, Sendable, CaseIterable {
        /// The cluster does not do DeleteRecords: a broker before Kafka 0.11 (`UNSUPPORTED_VERSION`,
        /// or librdkafka's own `_UNSUPPORTED_FEATURE` when the broker does not list the request, as
        /// librdkafka's mock cluster), or a Kafka-compatible service that refuses the request
        /// (`INVALID_REQUEST`). Asking again changes nothing until the cluster does.
        case unsupported
        /// This client may not delete records of the topic (`TOPIC_AUTHORIZATION_FAILED`: the
        /// Delete operation is not granted), until someone grants it.
        case notAuthorized = "not_authorized"
        /// Leaders moving, a broker down, no answer in time: asking again later may work.
        case transient
        /// Anything else (an offset beyond the partition's end, a policy of the broker's).
        case other = "failed"
    }

    public var kind: Kind
    public var error: KafkaError

    public init(_ kind: Kind, _ error: KafkaError) {
        self.kind = kind
        self.error = error
    }

    /// Sorts a librdkafka error code into a kind.
    package init(_ error: KafkaError) {
        self.init(Self.kind(of: error), error)
    }

    static func kind(of error: KafkaError) -> Kind {
        guard let code = error.code else { return .other }
        switch rd_kafka_resp_err_t(rawValue: code) {
        case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE, RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION, RD_KAFKA_RESP_ERR_INVALID_REQUEST:
            return .unsupported
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
            return .notAuthorized
        default:
            return error.severity == .transient ? .transient : .other
        }
    }

    public var description: String { error.description }
}

/// librdkafka's DeleteRecords, asked through a producer's client (the Admin API takes any
/// client) with a reply queue of its own: requests go out from the caller's thread without
/// waiting, and their answers wait in the queue until asked for.
///
/// Not `Sendable`: it remembers the requests it sent, for the thread that asks (a runner's).
final class RecordDeleter: RecordDeletionClient {
    /// Held so that its client outlives the queue made on it.
    private let producer: KafkaProducer
    private let queue: OpaquePointer
    private var client: OpaquePointer { producer.client }

    init(sharing producer: KafkaProducer) throws {
        self.producer = producer
        guard let queue = rd_kafka_queue_new(producer.client) else {
            throw KafkaError(.clientCreation, "librdkafka could not make a reply queue for DeleteRecords")
        }
        self.queue = queue
    }

    deinit {
        // An answer still to come is dropped with the queue; the request itself, if it reached a
        // broker, is carried out there all the same.
        rd_kafka_queue_destroy(queue)
    }

    func requestDeletion(below offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32) throws {
        let list = try NativePartitionList(offsets.map { TopicPartitionOffset($0.topicPartition, offset: $0.offset) })
        guard let deletion = rd_kafka_DeleteRecords_new(list.pointer) else {
            throw KafkaError(.clientCreation, "librdkafka could not make a DeleteRecords request for \(offsets)")
        }
        defer { rd_kafka_DeleteRecords_destroy(deletion) }
        guard let options = rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_DELETERECORDS) else {
            throw KafkaError(.clientCreation, "librdkafka could not make the options of a DeleteRecords request")
        }
        defer { rd_kafka_AdminOptions_destroy(options) }
        nextRequest += 1
        // The answer names its request by this number, since librdkafka answers in the order
        // the requests complete.
        rd_kafka_AdminOptions_set_opaque(options, UnsafeMutableRawPointer(bitPattern: nextRequest))
        var errstr = [CChar](repeating: 0, count: 512)
        // How long librdkafka waits for the answer, and how long the leaders wait for their
        // followers to delete too: the answer (a timeout at worst) comes within about this long.
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeoutMilliseconds, &errstr, errstr.count)
        _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMilliseconds, &errstr, errstr.count)
        var deletions: [OpaquePointer?] = [deletion]
        deletions.withUnsafeMutableBufferPointer { rd_kafka_DeleteRecords(client, $0.baseAddress, 1, options, queue) }
        asked[nextRequest] = offsets
    }

    /// The offsets of each request sent and not answered yet, by number: an answer that carries
    /// no result for a partition (a request refused whole) is told for each of them.
    private var asked: [Int: [TopicPartitionOffset]] = [:]
    private var nextRequest = 0

    func answer(waitingMilliseconds: Int32) -> [RecordDeletion]? {
        guard !asked.isEmpty, let event = rd_kafka_queue_poll(queue, waitingMilliseconds) else { return nil }
        defer { rd_kafka_event_destroy(event) }
        let number = Int(bitPattern: rd_kafka_event_opaque(event))
        guard let offsets = asked.removeValue(forKey: number) else { return nil }
        let eventError = rd_kafka_event_error(event)
        if eventError.isError {
            let text = rd_kafka_event_error_string(event).map { String(cString: $0) } ?? ""
            let error = RecordDeletionError(KafkaError.from(eventError, "deleting records: \(text)"))
            return offsets.map { RecordDeletion(partition: $0.topicPartition, below: $0.offset, outcome: .failure(error)) }
        }
        var results: [TopicPartition: Result<Int64, RecordDeletionError>] = [:]
        if let result = rd_kafka_event_DeleteRecords_result(event), let list = rd_kafka_DeleteRecords_result_offsets(result),
            let elements = list.pointee.elems
        {
            for index in 0..<Int(list.pointee.cnt) {
                let element = elements[index]
                guard let topic = element.topic.map({ String(cString: $0) }) else { continue }
                let partition = TopicPartition(topic: topic, partition: element.partition)
                // On an error the offset is the one asked for, not the log start.
                results[partition] =
                    element.err.isError
                    ? .failure(RecordDeletionError(KafkaError.from(element.err, "deleting the records of \(partition)")))
                    : .success(element.offset)
            }
        }
        return offsets.map { asked in
            RecordDeletion(
                partition: asked.topicPartition, below: asked.offset,
                outcome: results[asked.topicPartition]
                    ?? .failure(RecordDeletionError(.other, KafkaError(.librdkafka(code: -1), "deleting the records of \(asked.topicPartition): the answer left the partition out"))))
        }
    }
}
