import Foundation
import CRdKafka
import Logging
import Synchronization

/// A producer that never drops a record: when librdkafka's local queue is full, `send` waits
/// (serving delivery reports meanwhile) instead of failing, so backpressure reaches the caller.
///
/// Delivery reports arrive on whichever thread calls `poll`, `send` or `flush`.
/// `send` may be called from several threads; `poll` and `flush` should have one caller at a time.
public final class KafkaProducer: @unchecked Sendable {
    // @unchecked: only `let`s (the topic handles sit behind a mutex); librdkafka's producer
    // handle is thread-safe for produce calls, and `poll`/`flush` are documented one caller at a time.
    /// `internal`: the purge's `RecordDeleter` asks DeleteRecords through it.
    let client: OpaquePointer
    private let context: Unmanaged<ClientContext>
    /// Topic handles by name, created on first use and destroyed with the client, each with its
    /// name as a Swift String, its opaque (`TopicName`), released after the client.
    private let topics = Mutex<[String: (handle: OpaquePointer, name: Unmanaged<TopicName>)]>([:])
    private let isStopping: @Sendable () -> Bool
    public let logger: Logger

    /// A topic this producer sends to (see `topic(_:)`); valid as long as the producer.
    public typealias Topic = ProducerTopic

    /// - Parameter onDelivery: called once per record with its final outcome (after librdkafka's retries).
    /// - Parameter onError: client-level errors, on the polling thread (else they are logged).
    /// - Parameter isStopping: asked while a send waits for room in a full queue; `true` makes
    ///   the send give up (throwing) instead of waiting on a slow broker through a shutdown.
    public init(
        config: KafkaConfig, logger: Logger = Logger(label: "trackpipe.kafka.producer"),
        onDelivery: (@Sendable (DeliveryReport) -> Void)? = nil, onError: (@Sendable (KafkaError) -> Void)? = nil,
        isStopping: @escaping @Sendable () -> Bool = { false }
    ) throws {
        self.logger = logger
        self.isStopping = isStopping
        let ctx = ClientContext(logger: logger, onDelivery: onDelivery, onError: onError)
        (client, context) = try makeNativeClient(type: RD_KAFKA_PRODUCER, config: config, context: ctx) { conf in
            rd_kafka_conf_set_dr_msg_cb(conf) { client, message, _ in
                guard let message, let context = ClientContext.from(client: client), let onDelivery = context.onDelivery
                else { return }
                let msg = message.pointee
                let report = DeliveryReport(
                    token: UInt64(UInt(bitPattern: msg._private)),
                    topic: msg.rkt.map(TopicName.of) ?? "",
                    partition: msg.partition,
                    offset: msg.offset,
                    error: msg.err.isError ? KafkaError.from(msg.err, "delivery failed") : nil,
                    refused: msg.err.isError ? RefusedRecord(copying: message) : nil)
                onDelivery(report)
            }
        }
    }

    deinit {
        let names = topics.withLock { topics in
            for topic in topics.values { rd_kafka_topic_destroy(topic.handle) }
            return topics.values.map(\.name)
        }
        rd_kafka_destroy(client)
        // After the client: a delivery report served while it is destroyed still reads them.
        for name in names { name.release() }
        context.release()
    }

    /// Queues one record. Blocks while the local queue is full; throws only for errors that
    /// retrying cannot fix (unknown topic, record too large, fatal producer state).
    ///
    /// - Parameters:
    ///   - partition: `nil` lets the partitioner choose by key.
    ///   - timestamp: epoch milliseconds; `nil` lets librdkafka stamp the current time.
    ///   - token: returned in this record's `DeliveryReport`.
    public func send(
        topic: String, partition: Int32? = nil, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader] = [], timestamp: Int64? = nil, token: UInt64 = 0
    ) throws {
        try send(
            to: try self.topic(topic), partition: partition, key: key, value: value, headers: headers, timestamp: timestamp,
            token: token)
    }

    /// A handle for sending to `name`, looked up once: sending by handle skips librdkafka's
    /// topic lookup by name (a lock and a hash) on every record. Throws where librdkafka makes
    /// none (it returns NULL for a name it refuses).
    public func topic(_ name: String) throws -> Topic {
        try topics.withLock { known in
            if let known = known[name] { return Topic(name: name, handle: known.handle) }
            let box = Unmanaged.passRetained(TopicName(name))
            // The client's default topic settings (the ones -X gives, acks...), as a handle made
            // without a conf would have them, with the name as its opaque (as librdkafka's own C++
            // binding does). The conf is librdkafka's from here, whatever the outcome.
            let conf = rd_kafka_default_topic_conf_dup(client)
            rd_kafka_topic_conf_set_opaque(conf, box.toOpaque())
            guard let handle = rd_kafka_topic_new(client, name, conf) else {
                box.release()
                throw KafkaError.from(rd_kafka_last_error(), "making librdkafka's handle for topic \(name)")
            }
            known[name] = (handle, box)
            return Topic(name: name, handle: handle)
        }
    }

    /// Queues one record for `topic` (see `send(topic:...)`).
    public func send(
        to topic: Topic, partition: Int32? = nil, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers: [KafkaHeader] = [], timestamp: Int64? = nil, token: UInt64 = 0
    ) throws {
        try withNativeHeaders(headers) { nativeHeaders in
            try send(to: topic, partition: partition, key: key, value: value, headers: nativeHeaders, timestamp: timestamp, token: token)
        }
    }

    /// Queues one record for `topic` whose headers are encoded in `headerBlock`: librdkafka is
    /// given the names and values where they lie, nothing is copied before it copies them.
    public func send(
        to topic: Topic, partition: Int32? = nil, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headerBlock: KafkaHeaderBlock, timestamp: Int64? = nil, token: UInt64 = 0
    ) throws {
        let count = headerBlock.count
        try withUnsafeTemporaryAllocation(of: NativeHeader.self, capacity: count) { native in
            var index = 0
            headerBlock.forEach { name, _, value in
                native.initializeElement(at: index, to: NativeHeader(name: name, value: value?.baseAddress, size: value?.count ?? 0))
                index += 1
            }
            defer { native.deinitialize() }
            try send(
                to: topic, partition: partition, key: key, value: value, headers: UnsafeBufferPointer(native), timestamp: timestamp,
                token: token)
        }
    }

    private func send(
        to topic: Topic, partition: Int32?, key: UnsafeRawBufferPointer?, value: UnsafeRawBufferPointer?,
        headers nativeHeaders: UnsafeBufferPointer<NativeHeader>, timestamp: Int64?, token: UInt64
    ) throws {
        // On the stack: a heap array here would cost an allocation per record.
        try withUnsafeTemporaryAllocation(of: rd_kafka_vu_t.self, capacity: 7 + nativeHeaders.count) { fields in
            var count = 0
            func add(_ field: rd_kafka_vu_t) {
                fields.initializeElement(at: count, to: field)
                count += 1
            }
            add(rd_kafka_vu_t(vtype: RD_KAFKA_VTYPE_RKT, u: .init(rkt: try topic.handle ?? self.topic(topic.name).handle)))
            add(rd_kafka_vu_t(vtype: RD_KAFKA_VTYPE_MSGFLAGS, u: .init(i: RD_KAFKA_MSG_F_COPY)))
            if let partition {
                add(rd_kafka_vu_t(vtype: RD_KAFKA_VTYPE_PARTITION, u: .init(i32: partition)))
            }
            if let key {
                add(
                    rd_kafka_vu_t(
                        vtype: RD_KAFKA_VTYPE_KEY,
                        u: .init(mem: .init(ptr: UnsafeMutableRawPointer(mutating: key.baseAddress), size: key.count))))
            }
            if let value {
                add(
                    rd_kafka_vu_t(
                        vtype: RD_KAFKA_VTYPE_VALUE,
                        u: .init(mem: .init(ptr: UnsafeMutableRawPointer(mutating: value.baseAddress), size: value.count))))
            }
            if let timestamp {
                add(rd_kafka_vu_t(vtype: RD_KAFKA_VTYPE_TIMESTAMP, u: .init(i64: timestamp)))
            }
            add(rd_kafka_vu_t(vtype: RD_KAFKA_VTYPE_OPAQUE, u: .init(ptr: UnsafeMutableRawPointer(bitPattern: UInt(token)))))
            for header in nativeHeaders {
                add(
                    rd_kafka_vu_t(
                        vtype: RD_KAFKA_VTYPE_HEADER, u: .init(header: .init(name: header.name, val: header.value, size: header.size))))
            }
            try produce(UnsafeBufferPointer(rebasing: fields[0..<count]), topic: topic.name)
        }
    }

    /// Convenience for byte arrays.
    public func send(
        topic: String, partition: Int32? = nil, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader] = [],
        timestamp: Int64? = nil, token: UInt64 = 0
    ) throws {
        try withOptionalBytes(key) { keyBytes in
            try withOptionalBytes(value) { valueBytes in
                try send(
                    topic: topic, partition: partition, key: keyBytes, value: valueBytes, headers: headers,
                    timestamp: timestamp, token: token)
            }
        }
    }

    private func produce(_ fields: UnsafeBufferPointer<rd_kafka_vu_t>, topic: String) throws {
        // librdkafka copies key, value (F_COPY) and headers inside produceva, so the
        // caller's buffers need to live only for this call.
        while true {
            let error = rd_kafka_produceva(client, fields.baseAddress, fields.count)
            guard let error else { return }
            let code = rd_kafka_error_code(error)
            if code == RD_KAFKA_RESP_ERR__QUEUE_FULL {
                rd_kafka_error_destroy(error)
                if isStopping() {
                    throw KafkaError(
                        .librdkafka(code: code.rawValue),
                        "producing to \(topic): the local queue is full (the broker is slow or unreachable) and a stop was requested; the record was not sent")
                }
                // Backpressure: serve delivery reports until librdkafka has room again.
                rd_kafka_poll(client, 1)
                continue
            }
            throw KafkaError.consuming(error, "producing to \(topic)")
        }
    }

    /// Serves delivery reports and logs; returns how many events were served.
    @discardableResult
    public func poll(timeoutMilliseconds: Int32 = 0) -> Int {
        Int(rd_kafka_poll(client, timeoutMilliseconds))
    }

    /// Waits until every queued record has a delivery report, or throws after `timeoutMilliseconds`.
    public func flush(timeoutMilliseconds: Int32 = 30_000) throws {
        let err = rd_kafka_flush(client, timeoutMilliseconds)
        if err.isError {
            throw KafkaError.from(
                err, "flush did not complete within \(timeoutMilliseconds) ms (\(outstanding) records still queued); is the broker reachable?")
        }
    }

    /// Records queued or in flight, not yet reported.
    public var outstanding: Int { Int(rd_kafka_outq_len(client)) }
}

extension RefusedRecord {
    /// Copies a refused message out of librdkafka's hands (it frees it after the callback).
    init(copying message: UnsafePointer<rd_kafka_message_t>) {
        let msg = message.pointee
        func bytes(_ pointer: UnsafeMutableRawPointer?, _ count: Int) -> [UInt8]? {
            guard let pointer else { return nil }
            return Array(UnsafeRawBufferPointer(start: pointer, count: count))
        }
        var timestampType = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
        let timestamp = rd_kafka_message_timestamp(message, &timestampType)
        self.init(
            key: bytes(msg.key, msg.key_len), value: bytes(msg.payload, msg.len), headers: copiedHeaders(of: message),
            timestamp: timestampType == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? nil : timestamp)
    }
}

/// A topic's name, made once, as a delivery report gives it: made from librdkafka's C string
/// for each report, it cost an allocation and a free per record sent (about 500 instructions;
/// callgrind).
private final class TopicName: Sendable {
    let name: String

    init(_ name: String) { self.name = name }

    /// The name of `topic`: its opaque's, for a handle this producer made, else read from librdkafka
    /// (a handle made before with another conf keeps that one).
    static func of(_ topic: OpaquePointer) -> String {
        guard let opaque = rd_kafka_topic_opaque(topic) else { return string(from: rd_kafka_topic_name(topic), or: "") }
        return Unmanaged<TopicName>.fromOpaque(opaque).takeUnretainedValue().name
    }
}

private struct NativeHeader {
    var name: UnsafePointer<CChar>
    var value: UnsafeRawPointer?
    var size: Int
}

/// Headers as C strings and stable byte buffers for the length of one produce call, all in one
/// temporary buffer (on the stack when small): a dead letter carries five headers, and a
/// string and a buffer allocated for each made its send cost several times a plain record's.
private func withNativeHeaders<R>(_ headers: [KafkaHeader], _ body: (UnsafeBufferPointer<NativeHeader>) throws -> R) rethrows -> R {
    if headers.isEmpty { return try body(UnsafeBufferPointer(start: nil, count: 0)) }
    var bytes = 0
    for header in headers { bytes += header.key.utf8.count + 1 + (header.value?.count ?? 0) }
    return try withUnsafeTemporaryAllocation(byteCount: max(bytes, 1), alignment: 1) { storage in
        try withUnsafeTemporaryAllocation(of: NativeHeader.self, capacity: headers.count) { native in
            // Safe: an allocation of at least one byte has an address.
            let base = storage.baseAddress!
            var at = 0
            for (index, header) in headers.enumerated() {
                let name = base + at
                var key = header.key
                key.withUTF8 { utf8 in
                    if let base = utf8.baseAddress { name.copyMemory(from: base, byteCount: utf8.count) }
                    at += utf8.count
                }
                storage[at] = 0
                at += 1
                var value: UnsafeRawPointer?
                if let bytes = header.value {
                    let start = base + at
                    bytes.withUnsafeBytes { if let base = $0.baseAddress { start.copyMemory(from: base, byteCount: $0.count) } }
                    at += bytes.count
                    value = UnsafeRawPointer(start)
                }
                native.initializeElement(
                    at: index,
                    to: NativeHeader(
                        name: UnsafePointer(name.assumingMemoryBound(to: CChar.self)), value: value, size: header.value?.count ?? 0))
            }
            defer { native.deinitialize() }
            return try body(UnsafeBufferPointer(native))
        }
    }
}

func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
    guard let bytes else { return try body(nil) }
    return try bytes.withUnsafeBytes { try body($0) }
}
