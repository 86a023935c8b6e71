import CRdKafka
import Logging

/// A consumer-group member with manual commits of explicit offsets.
///
/// Threading: `poll` (and the rebalance handler it runs) should have one caller at a time;
/// commits and queries may come from that same thread. Defaults favour correctness:
/// auto-commit is off, offsets are committed only when the caller says which.
public final class KafkaConsumer: @unchecked Sendable {
    // @unchecked: `closed`, `subscribed`, the batch buffer and the wake policy are used only by
    // the one thread that polls, subscribes and closes (see Threading above), and by `deinit`
    // after it; librdkafka's handle is thread-safe for the other calls.
    let client: OpaquePointer
    private let context: Unmanaged<ClientContext>
    private let batch: UnsafeMutablePointer<UnsafeMutablePointer<rd_kafka_message_t>>
    private let batchCapacity: Int
    private var closed = false
    /// The consumer asked to join its group (`subscribe`): only such a consumer can have had a
    /// join answered, which is what `destroyWouldAbort` is about.
    private var subscribed = false
    /// The queue every partition's messages are forwarded to (what `poll` reads).
    private let consumerQueue: OpaquePointer
    let fetchWaker: FetchWaker?
    private var wakePolicy: FetchWakePolicy?
    public let logger: Logger

    /// - Parameter config: must include `group.id` to `subscribe`. `enable.auto.commit` defaults to false.
    /// - Parameter maxBatch: the most records one `poll` hands back.
    /// - Parameter onError: client-level errors, on the polling thread (else they are logged).
    /// - Parameter wakesFetcher: wake librdkafka's fetcher whenever the queue has drained below
    ///   the prefetch thresholds it stopped at (`FetchWakePolicy`), so that a shallow prefetch
    ///   (`queued.min.messages`, `queued.max.messages.kbytes`) does not stall a consumer that
    ///   works on what it reads. For consumers that read steadily; costs one small request per
    ///   refill of the queue. That is librdkafka 2.0.2's (up to 2.1) remedy; from 2.2 on, the
    ///   fetcher backs a full queue off for `fetch.queue.backoff.ms` (a second by default)
    ///   and a wake within it fetches nothing, so there the consumer sets that property to
    ///   `fetchQueueBackoffMilliseconds` instead (unless `config` sets it) and starts no waker.
    public init(
        config: KafkaConfig, logger: Logger = Logger(label: "trackpipe.kafka.consumer"),
        rebalance: RebalanceHandler? = nil, maxBatch: Int = 4096, wakesFetcher: Bool = false,
        onError: (@Sendable (KafkaError) -> Void)? = nil
    ) throws {
        self.logger = logger
        guard let group = config["group.id"], !group.isEmpty else {
            throw KafkaError(
                .invalidProperty(name: "group.id", value: ""),
                "Kafka property group.id is required: the consumer commits its offsets to a group. Set group.id (trackpipe: --group).")
        }
        var effective = KafkaConfig(["enable.auto.commit": "false", "enable.auto.offset.store": "false"])
        let backsOffBriefly = wakesFetcher && Librdkafka.hasFetchQueueBackoff
        if backsOffBriefly { effective["fetch.queue.backoff.ms"] = "\(Self.fetchQueueBackoffMilliseconds)" }
        effective = effective.merging(config)
        let ctx = ClientContext(logger: logger, rebalance: rebalance, onError: onError)
        (client, context) = try makeNativeClient(type: RD_KAFKA_CONSUMER, config: effective, context: ctx) { conf in
            rd_kafka_conf_set_rebalance_cb(conf) { client, err, partitions, opaque in
                guard let client, let partitions else { return }
                KafkaConsumer.rebalance(client: client, err: err, partitions: partitions, context: ClientContext.from(opaque))
            }
        }
        // Route everything (logs aside) through the consumer queue so that one batch call serves it all.
        rd_kafka_poll_set_consumer(client)
        // librdkafka has this queue for a client with a group (required above), NULL without.
        guard let queue = rd_kafka_queue_get_consumer(client) else {
            rd_kafka_destroy(client)
            context.release()
            throw KafkaError(.clientCreation, "librdkafka made the consumer without a queue to poll (group.id \(group))")
        }
        consumerQueue = queue
        batchCapacity = max(1, maxBatch)
        batch = .allocate(capacity: batchCapacity)
        if wakesFetcher && !backsOffBriefly {
            fetchWaker = FetchWaker(client: client)
            wakePolicy = FetchWakePolicy(
                minMessages: Self.integerProperty(client, "queued.min.messages") ?? 100_000,
                maxBytes: (Self.integerProperty(client, "queued.max.messages.kbytes") ?? 65_536) * 1024)
        } else {
            fetchWaker = nil
        }
    }

    deinit {
        fetchWaker?.stop()
        if !closed { rd_kafka_consumer_close(client) }
        rd_kafka_queue_destroy(consumerQueue)
        batch.deallocate()
        if subscribed, Self.destroyWouldAbort(client, assigned: context.takeUnretainedValue().hasBeenAssigned) {
            // The client is left behind, closed, its context with it: librdkafka's threads may
            // still log through that context. It holds no partitions and commits nothing.
            logger.debug("the consumer is left undestroyed: librdkafka \(Librdkafka.version) would abort (librdkafka #4312)")
            return
        }
        rd_kafka_destroy(client)
        context.release()
    }

    /// Whether destroying this subscribed consumer would abort the process: librdkafka before
    /// 2.3.0 asserts in its cooperative-sticky assignor when the group answered a join but never
    /// handed out an assignment (#4312), as when a worker stops while its coordinator fails
    /// every SyncGroup. Whether the group answered a join cannot be asked, so a consumer never
    /// assigned anything counts as one it did. (A consumer that only `assign`s never joins: it
    /// is always destroyed, as the state restorer's and the tools' consumers must be.)
    static func destroyWouldAbort(_ client: OpaquePointer, assigned: Bool) -> Bool {
        guard Librdkafka.versionNumber < Librdkafka.nullAssignorStateVersion, !assigned else { return false }
        return assignors(client).contains("cooperative-sticky")
    }

    /// The configured `partition.assignment.strategy`, one name each.
    private static func assignors(_ client: OpaquePointer) -> [String] {
        guard let strategy = stringProperty(client, "partition.assignment.strategy") else { return [] }
        return strategy.split(separator: ",").map { $0.filter { $0 != " " } }
    }

    /// How long a fetcher that stopped at a full queue waits before it looks again, where
    /// librdkafka has `fetch.queue.backoff.ms` and the consumer `wakesFetcher`: the longest a
    /// drained queue stays empty. The broker thread looks at a still-full queue this often,
    /// which costs next to nothing; librdkafka's default, a second, was the stall.
    static let fetchQueueBackoffMilliseconds = 10

    /// A property's value as the client holds it (librdkafka's default when none was set).
    static func integerProperty(_ client: OpaquePointer, _ name: String) -> Int? {
        stringProperty(client, name).flatMap { Int($0) }
    }

    private static func stringProperty(_ client: OpaquePointer, _ name: String) -> String? {
        var size = 0
        guard rd_kafka_conf_get(rd_kafka_conf(client), name, nil, &size) == RD_KAFKA_CONF_OK, size > 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: size)
        guard rd_kafka_conf_get(rd_kafka_conf(client), name, &buffer, &size) == RD_KAFKA_CONF_OK else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether the group's rebalance protocol is COOPERATIVE (incremental assign and unassign).
    ///
    /// librdkafka answers nil when its group thread cannot be asked: for a client without a
    /// group, and, seen on 2.16 (never on 2.0.2), in the last revocation of a consumer that is
    /// closing, whose group is being torn down. Then the configured assignors decide, as they do
    /// inside librdkafka: the protocol is cooperative when every one of them is, and of
    /// librdkafka's assignors only cooperative-sticky is.
    static func rebalanceIsCooperative(_ client: OpaquePointer) -> Bool {
        if let name = rd_kafka_rebalance_protocol(client) { return String(cString: name) == "COOPERATIVE" }
        let names = assignors(client)
        return !names.isEmpty && names.allSatisfy { $0 == "cooperative-sticky" }
    }

    /// The `group.instance.id` this consumer joins its group with (static membership, KIP-345),
    /// as the live client holds it, which is what librdkafka sends in its JoinGroup request;
    /// nil for a dynamic member.
    public var groupInstanceId: String? {
        Self.stringProperty(client, "group.instance.id").flatMap { $0.isEmpty ? nil : $0 }
    }

    private static func rebalance(
        client: OpaquePointer, err: rd_kafka_resp_err_t,
        partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>, context: ClientContext?
    ) {
        let cooperative = rebalanceIsCooperative(client)
        let list = NativePartitionList.offsets(of: partitions).map(\.topicPartition)
        func failed(_ error: KafkaError?) {
            guard let error else { return }
            context?.logger.error("\(error)")
            context?.rebalance?.assignmentFailed(error)
        }
        switch err {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            context?.noteAssignment()
            if let error = applyAssignment(client, partitions, cooperative: cooperative) {
                failed(error)
                return
            }
            context?.logger.info("partitions assigned", metadata: ["partitions": "\(list)"])
            context?.rebalance?.partitionsAssigned(list)
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            context?.logger.info("partitions revoked", metadata: ["partitions": "\(list)"])
            context?.noteRevocation(list)
            context?.rebalance?.partitionsRevoking(list)
            failed(applyAssignment(client, partitions, cooperative: cooperative, revoking: true))
        default:
            context?.logger.error("rebalance failed: \(KafkaError.from(err, "rebalance"))")
            context?.noteRevocation(nil)
            failed(applyAssignment(client, nil, cooperative: false))
        }
    }

    /// Takes (or, `revoking`, gives up) partitions the way the group's protocol requires;
    /// librdkafka's refusal, if any.
    static func applyAssignment(
        _ client: OpaquePointer, _ partitions: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, cooperative: Bool,
        revoking: Bool = false
    ) -> KafkaError? {
        if cooperative {
            guard let partitions else { return nil }
            let error = revoking ? rd_kafka_incremental_unassign(client, partitions) : rd_kafka_incremental_assign(client, partitions)
            return error.map { KafkaError.consuming($0, revoking ? "giving up the revoked partitions" : "taking the assigned partitions") }
        }
        let err = rd_kafka_assign(client, revoking ? nil : partitions)
        return err.isError ? KafkaError.from(err, revoking ? "giving up the revoked partitions" : "taking the assigned partitions") : nil
    }

    public func subscribe(topics: [String]) throws {
        let list = NativePartitionList(topics.map { TopicPartition(topic: $0, partition: Int32(RD_KAFKA_PARTITION_UA)) })
        subscribed = true
        let err = rd_kafka_subscribe(client, list.pointer)
        if err.isError { throw KafkaError.from(err, "subscribing to \(topics)") }
    }

    /// Takes partitions without a group (no rebalancing): for tools and tests.
    public func assign(_ offsets: [TopicPartitionOffset]) throws {
        // Learn the partition leaders first: without them librdkafka defers the first offset
        // lookup by its retry timer (about half a second) before fetching anything.
        for topic in Set(offsets.map(\.topic)) { loadMetadata(topic: topic) }
        let list = try NativePartitionList(offsets)
        let err = rd_kafka_assign(client, list.pointer)
        if err.isError { throw KafkaError.from(err, "assigning \(offsets)") }
    }

    private func loadMetadata(topic: String, timeoutMilliseconds: Int32 = 5_000) {
        guard let handle = rd_kafka_topic_new(client, topic, nil) else { return }
        defer { rd_kafka_topic_destroy(handle) }
        var metadata: UnsafePointer<rd_kafka_metadata>?
        let err = rd_kafka_metadata(client, 0, handle, &metadata, timeoutMilliseconds)
        if let metadata { rd_kafka_metadata_destroy(metadata) }
        if err.isError { logger.debug("metadata for \(topic) not loaded before assign: \(KafkaError.from(err, "metadata"))") }
    }

    /// Hands up to `maxBatch` events to `body`, one at a time, waiting at most `timeoutMilliseconds`
    /// for the first. Rebalance callbacks run in here too. Returns the number of events handed over.
    @discardableResult
    public func poll(timeoutMilliseconds: Int32, _ body: (ConsumerEvent<ConsumerRecord>) throws -> Void) rethrows -> Int {
        try pollBatch(timeoutMilliseconds: timeoutMilliseconds) { batch in
            for event in batch { try body(event) }
            return batch.count
        } ?? 0
    }

    /// Hands the whole batch to `body` at once, so that a caller can work on many records in
    /// place (in parallel, or coming back to one after later ones) before librdkafka reclaims
    /// them when `body` returns. `nil` when nothing arrived in time.
    ///
    /// The batch is gathered one message at a time with `rd_kafka_consumer_poll` (waiting only
    /// for the first), not with `rd_kafka_consume_batch_queue`: in librdkafka 2.0.x the batch
    /// call skips offsets of partitions that stay assigned while a rebalance (or a pause or
    /// seek) changes others — measured here as 36-offset holes during a cooperative rebalance.
    /// The per-message call drops outdated messages without moving the position past them.
    ///
    /// A rebalance callback can run between two messages of the batch: the batch says which
    /// partitions were revoked after how many messages (`ConsumerBatch.revocations`), since the
    /// messages gathered before belong to an assignment that no longer holds.
    public func pollBatch<R>(timeoutMilliseconds: Int32, _ body: (ConsumerBatch) throws -> R) rethrows -> R? {
        let context = self.context.takeUnretainedValue()
        context.beginGathering()
        wakePolicy?.beforeGathering(queued: rd_kafka_queue_length(consumerQueue))
        var count = 0
        var payloadBytes = 0
        while count < batchCapacity {
            context.gatheredSoFar(count)
            guard let message = rd_kafka_consumer_poll(client, count == 0 ? timeoutMilliseconds : 0) else { break }
            (batch + count).initialize(to: message)
            payloadBytes &+= message.pointee.len
            count += 1
        }
        if let fetchWaker,
            wakePolicy?.afterGathering(
                queued: rd_kafka_queue_length(consumerQueue), messages: count, payloadBytes: payloadBytes,
                wakeInFlight: fetchWaker.isWaking) == true
        {
            fetchWaker.wake()
        }
        let revocations = context.endGathering()
        guard count > 0 else { return nil }
        defer {
            for index in 0..<count { rd_kafka_message_destroy(batch[index]) }
        }
        return try body(ConsumerBatch(messages: UnsafeBufferPointer(start: batch, count: count), revocations: revocations))
    }

    /// Commits exactly these offsets (the next offset to read), with optional metadata, and waits
    /// for the broker's answer.
    public func commit(_ offsets: [TopicPartitionOffset]) throws {
        guard !offsets.isEmpty else { return }
        let list = try NativePartitionList(offsets)
        let err = rd_kafka_commit(client, list.pointer, 0)
        if err.isError { throw KafkaError.from(err, "committing \(offsets)") }
        if let error = list.firstError("committing") { throw error }
    }

    /// The group's committed offsets (and metadata) for these partitions; offset is
    /// `KafkaOffset.invalid` where nothing was committed.
    public func committed(_ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000) throws -> [TopicPartitionOffset] {
        let list = NativePartitionList(partitions)
        let err = rd_kafka_committed(client, list.pointer, timeoutMilliseconds)
        if err.isError { throw KafkaError.from(err, "reading committed offsets") }
        return list.offsets
    }

    /// What `group` has committed on these partitions, as `committed` gives its own group's,
    /// asked of the group's coordinator through this client (the Admin API's
    /// ListConsumerGroupOffsets): a group whose commits a check reads needs no client of its id.
    public func committed(by group: String, _ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000) throws -> [TopicPartitionOffset] {
        let list = NativePartitionList(partitions)
        let context = "reading the committed offsets of group \(group)"
        guard let request = rd_kafka_ListConsumerGroupOffsets_new(group, list.pointer) else {
            throw AdminRequestFailure.unavailable(what: "a ListConsumerGroupOffsets request").error(context)
        }
        defer { rd_kafka_ListConsumerGroupOffsets_destroy(request) }
        let client = client
        // The request's own timeout ends it with an event; the margin is for that event to come.
        let found = try adminRequest(
            on: client, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, timeout: .request(timeoutMilliseconds), margin: 1_000,
            send: { options, queue in
                var requests: [OpaquePointer?] = [request]
                requests.withUnsafeMutableBufferPointer { rd_kafka_ListConsumerGroupOffsets(client, $0.baseAddress, 1, options, queue) }
            },
            read: { event -> [TopicPartitionOffset] in
                var count = 0
                guard let result = rd_kafka_event_ListConsumerGroupOffsets_result(event),
                    let groups = rd_kafka_ListConsumerGroupOffsets_result_groups(result, &count), count == 1, let answer = groups[0]
                else { throw KafkaError(.librdkafka(code: -1), "\(context): an answer without the group") }
                if let error = rd_kafka_group_result_error(answer) {
                    throw KafkaError.from(rd_kafka_error_code(error), context, detail: string(from: rd_kafka_error_string(error), or: ""))
                }
                return rd_kafka_group_result_partitions(answer).map { NativePartitionList.offsets(of: $0) } ?? []
            }
        ).mapError { $0.error(context) }.get()
        // In the order asked (the answer's may differ), with nothing committed where none is named.
        return partitions.map { asked in
            found.first { $0.topicPartition == asked } ?? TopicPartitionOffset(asked, offset: KafkaOffset.invalid)
        }
    }

    /// The low and high watermarks (first offset, next offset to be written) from the broker.
    public func watermarks(_ partition: TopicPartition, timeoutMilliseconds: Int32 = 10_000) throws -> (low: Int64, high: Int64) {
        var low: Int64 = 0
        var high: Int64 = 0
        let err = rd_kafka_query_watermark_offsets(client, partition.topic, partition.partition, &low, &high, timeoutMilliseconds)
        if err.isError { throw KafkaError.from(err, "querying watermarks of \(partition)") }
        return (low, high)
    }

    /// For each partition, the earliest offset whose timestamp is at or after `timestamp` (epoch ms);
    /// `KafkaOffset.end` where there is none. Backfills start here.
    public func offsets(forTimestamp timestamp: Int64, partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000) throws
        -> [TopicPartitionOffset]
    {
        let list = try NativePartitionList(partitions.map { TopicPartitionOffset($0, offset: timestamp) })
        let err = rd_kafka_offsets_for_times(client, list.pointer, timeoutMilliseconds)
        if err.isError { throw KafkaError.from(err, "looking up offsets for timestamp \(timestamp)") }
        if let error = list.firstError("looking up offsets for timestamp") { throw error }
        return list.offsets
    }

    /// The next offset to be written in each partition (the high watermark), all partitions in
    /// one request: where a bounded run stops.
    public func endOffsets(_ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000) throws -> [TopicPartitionOffset] {
        try offsets(forTimestamp: KafkaOffset.end, partitions: partitions, timeoutMilliseconds: timeoutMilliseconds)
    }

    /// The first offset still stored in each partition (the low watermark), in one request.
    public func beginningOffsets(_ partitions: [TopicPartition], timeoutMilliseconds: Int32 = 10_000) throws
        -> [TopicPartitionOffset]
    {
        try offsets(forTimestamp: KafkaOffset.beginning, partitions: partitions, timeoutMilliseconds: timeoutMilliseconds)
    }

    /// Stops fetching these partitions (records already fetched are not handed out) until
    /// `resume`; the member stays in the group. Backpressure: the caller keeps polling.
    public func pause(_ partitions: [TopicPartition]) throws {
        guard !partitions.isEmpty else { return }
        let list = NativePartitionList(partitions)
        let err = rd_kafka_pause_partitions(client, list.pointer)
        if err.isError { throw KafkaError.from(err, "pausing \(partitions)") }
        if let error = list.firstError("pausing") { throw error }
    }

    /// Fetches paused partitions again, from the position after the last record handed out.
    public func resume(_ partitions: [TopicPartition]) throws {
        guard !partitions.isEmpty else { return }
        let list = NativePartitionList(partitions)
        let err = rd_kafka_resume_partitions(client, list.pointer)
        if err.isError { throw KafkaError.from(err, "resuming \(partitions)") }
        if let error = list.firstError("resuming") { throw error }
    }

    /// Moves the fetch position of assigned partitions.
    public func seek(_ offsets: [TopicPartitionOffset], timeoutMilliseconds: Int32 = 10_000) throws {
        let list = try NativePartitionList(offsets)
        if let error = rd_kafka_seek_partitions(client, list.pointer, timeoutMilliseconds) {
            throw KafkaError.consuming(error, "seeking \(offsets)")
        }
        if let error = list.firstError("seeking") { throw error }
    }

    /// The low and high watermarks librdkafka last saw in fetch responses: no request is made,
    /// so this is cheap enough for a lag gauge. `nil` before the first fetch.
    public func cachedWatermarks(_ partition: TopicPartition) -> (low: Int64, high: Int64)? {
        var low: Int64 = -1
        var high: Int64 = -1
        let err = rd_kafka_get_watermark_offsets(client, partition.topic, partition.partition, &low, &high)
        guard !err.isError, high >= 0 else { return nil }
        return (low, high)
    }

    /// Leaves the group cleanly (revoking partitions through the rebalance handler), so that
    /// the other members take over at once instead of after the session timeout.
    public func close() {
        guard !closed else { return }
        closed = true
        if let fetchWaker {
            fetchWaker.stop()
            logger.debug("the fetch waker woke librdkafka's fetcher \(fetchWaker.count) times")
        }
        let err = rd_kafka_consumer_close(client)
        if err.isError { logger.warning("closing the consumer: \(KafkaError.from(err, "close"))") }
    }
}
