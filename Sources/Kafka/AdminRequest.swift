import CRdKafka

/// Why an Admin API request that was waited for came to nothing, for its caller to say in its
/// own words (a thrown error, or a topic left undescribed).
enum AdminRequestFailure: Error {
    /// librdkafka could not make what the request needs (`what`: "a reply queue", ...).
    case unavailable(what: String)
    /// No answer within the wait.
    case noAnswer
    /// The request as a whole failed: librdkafka's code, and its words for it.
    case failed(rd_kafka_resp_err_t, detail: String)

    /// The failure as an error of the request `context` names ("creating topic t").
    func error(_ context: String) -> KafkaError {
        switch self {
        case .unavailable(let what): KafkaError(.clientCreation, "\(context): librdkafka could not make \(what)")
        case .noAnswer: KafkaError(.librdkafka(code: RD_KAFKA_RESP_ERR__TIMED_OUT.rawValue), "\(context): no answer in time")
        case .failed(let code, let detail): KafkaError.from(code, context, detail: detail)
        }
    }
}

/// How long an Admin API request may take: librdkafka's request timeout (the request's own
/// round trip), or its operation timeout (how long a broker may wait for the change to take, as
/// CreateTopics does).
enum AdminTimeout {
    case request(Int32)
    case operation(Int32)

    var milliseconds: Int32 {
        switch self {
        case .request(let ms), .operation(let ms): ms
        }
    }
}

/// One Admin API request on `client`, waited for: its reply queue and options are made here,
/// the timeout set, `send` given both to send the request, and `read` given the answer's event
/// once the request as a whole succeeded (the event and the rest are freed when it returns);
/// the request's own failure is returned, what `read` throws thrown.
/// The wait is the timeout plus `margin` ms, for librdkafka's own answer to a request that timed
/// out to come. The synchronous requests (CreateTopics, DescribeConfigs,
/// ListConsumerGroupOffsets) share it; the purge's DeleteRecords, answered later, does not wait.
func adminRequest<R>(
    on client: OpaquePointer, _ operation: rd_kafka_admin_op_t, timeout: AdminTimeout, margin: Int32,
    send: (_ options: OpaquePointer, _ queue: OpaquePointer) -> Void, read: (_ event: OpaquePointer) throws -> R
) rethrows -> Result<R, AdminRequestFailure> {
    guard let queue = rd_kafka_queue_new(client) else { return .failure(.unavailable(what: "a reply queue")) }
    defer { rd_kafka_queue_destroy(queue) }
    guard let options = rd_kafka_AdminOptions_new(client, operation) else { return .failure(.unavailable(what: "the request's options")) }
    defer { rd_kafka_AdminOptions_destroy(options) }
    var errstr = [CChar](repeating: 0, count: 512)
    switch timeout {
    case .request(let ms): _ = rd_kafka_AdminOptions_set_request_timeout(options, ms, &errstr, errstr.count)
    case .operation(let ms): _ = rd_kafka_AdminOptions_set_operation_timeout(options, ms, &errstr, errstr.count)
    }
    send(options, queue)
    guard let event = rd_kafka_queue_poll(queue, timeout.milliseconds &+ margin) else { return .failure(.noAnswer) }
    defer { rd_kafka_event_destroy(event) }
    let eventError = rd_kafka_event_error(event)
    if eventError.isError { return .failure(.failed(eventError, detail: string(from: rd_kafka_event_error_string(event), or: ""))) }
    return .success(try read(event))
}
