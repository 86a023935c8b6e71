import CRdKafka
import Logging
import Synchronization

/// What librdkafka's C callbacks need to reach Swift: the logger and the handlers.
/// librdkafka hands it back as the client's opaque pointer; the client keeps it alive
/// until the native handle is destroyed.
final class ClientContext: Sendable {
    /// The secret values of the client's configuration, scrubbed from everything librdkafka
    /// logs through this context. Set by `makeNativeClient` before the client exists, so that
    /// the first line librdkafka logs is covered too.
    private let secrets = Mutex(SecretRedactor())
    let logger: Logger
    let onDelivery: (@Sendable (DeliveryReport) -> Void)?
    let rebalance: RebalanceHandler?
    /// Client-level errors (connections, authentication, fatal producer states), called on
    /// the thread that polls the client. Without it they are logged.
    let onError: (@Sendable (KafkaError) -> Void)?
    /// Messages gathered so far by the consumer's `pollBatch` in progress, and the partitions
    /// revoked while it gathered: a rebalance callback runs inside a poll, between messages.
    private let gathered = Atomic<Int>(0)
    private let revocations = Mutex<[ConsumerBatch.Revocation]>([])
    /// Whether the group has handed the consumer an assignment (even an empty one) at least once.
    private let assigned = Atomic<Bool>(false)

    init(
        logger: Logger, onDelivery: (@Sendable (DeliveryReport) -> Void)? = nil, rebalance: RebalanceHandler? = nil,
        onError: (@Sendable (KafkaError) -> Void)? = nil
    ) {
        self.logger = logger
        self.onDelivery = onDelivery
        self.rebalance = rebalance
        self.onError = onError
    }

    /// A batch begins: nothing gathered, nothing revoked.
    func beginGathering() {
        gathered.store(0, ordering: .relaxed)
        revocations.withLock { $0.removeAll() }
    }

    func gatheredSoFar(_ count: Int) { gathered.store(count, ordering: .relaxed) }

    /// Partitions (nil: all) are taken away while a batch is gathered.
    func noteRevocation(_ partitions: [TopicPartition]?) {
        let before = gathered.load(ordering: .relaxed)
        revocations.withLock { $0.append(ConsumerBatch.Revocation(before: before, partitions: partitions)) }
    }

    func endGathering() -> [ConsumerBatch.Revocation] {
        revocations.withLock { list in
            defer { list.removeAll() }
            return list
        }
    }

    /// The group's coordinator handed this consumer an assignment: librdkafka calls the
    /// rebalance handler for every assignment it receives, empty ones included, after its
    /// assignor has recorded it.
    func noteAssignment() { assigned.store(true, ordering: .relaxed) }

    var hasBeenAssigned: Bool { assigned.load(ordering: .relaxed) }

    static func from(_ opaque: UnsafeMutableRawPointer?) -> ClientContext? {
        guard let opaque else { return nil }
        return Unmanaged<ClientContext>.fromOpaque(opaque).takeUnretainedValue()
    }

    static func from(client: OpaquePointer?) -> ClientContext? {
        guard let client else { return nil }
        return from(rd_kafka_opaque(client))
    }

    func adoptSecrets(of config: KafkaConfig) {
        let redactor = config.redactor
        secrets.withLock { $0 = $0.merging(redactor) }
    }

    func redact(_ text: String) -> String {
        secrets.withLock { $0 }.redact(text)
    }
}

/// librdkafka logs at syslog levels from its own threads; they go to swift-log so that one
/// logging setup (level, format, destination) covers the whole worker.
///
/// librdkafka 2.0.2 redacts the sensitive properties in its own configuration dump
/// (`debug=conf`), but other lines quote configured values as they are: an OpenSSL error
/// names the file of `ssl.key.location`, for one. Every line is therefore scrubbed of the
/// client's secret values before it reaches a handler.
enum LogBridge {
    static func install(on conf: OpaquePointer) {
        rd_kafka_conf_set_log_cb(conf) { client, level, facility, message in
            guard let context = ClientContext.from(client: client) else { return }
            let swiftLevel: Logger.Level =
                switch level {
                case 0...2: .critical
                case 3: .error
                case 4: .warning
                case 5: .notice
                case 6: .info
                default: .debug
                }
            let text = context.redact(message.map { String(cString: $0) } ?? "")
            let fac = facility.map { String(cString: $0) } ?? ""
            // FAIL is a broker connection that failed or dropped: librdkafka reconnects by
            // itself, and whether it matters shows in the error callback and in /health.
            let level = fac == "FAIL" && swiftLevel > .warning ? .warning : swiftLevel
            context.logger.log(level: level, "\(text)", metadata: ["librdkafka.facility": "\(fac)"])
        }
    }
}

/// Creates a native client with the context attached; on failure nothing leaks.
func makeNativeClient(
    type: rd_kafka_type_t, config: KafkaConfig, context: ClientContext, configure: (OpaquePointer) -> Void = { _ in }
) throws -> (OpaquePointer, Unmanaged<ClientContext>) {
    let conf = try config.makeNative()
    context.adoptSecrets(of: config)
    let retained = Unmanaged.passRetained(context)
    rd_kafka_conf_set_opaque(conf, retained.toOpaque())
    LogBridge.install(on: conf)
    rd_kafka_conf_set_error_cb(conf) { client, code, reason, opaque in
        guard let context = ClientContext.from(opaque) else { return }
        let err = rd_kafka_resp_err_t(rawValue: code)
        var error = KafkaError.from(err, context.redact(reason.map { String(cString: $0) } ?? "client error"))
        if err == RD_KAFKA_RESP_ERR__FATAL, let client {
            var text = [CChar](repeating: 0, count: 512)
            let underlying = rd_kafka_fatal_error(client, &text, text.count)
            error = KafkaError.from(underlying, "fatal client error: \(context.redact(string(fromErrorBuffer: text)))")
            error.kind = .librdkafka(code: RD_KAFKA_RESP_ERR__FATAL.rawValue)
        }
        if let onError = context.onError {
            onError(error)
        } else {
            context.logger.log(level: error.severity == .transient ? .warning : .error, "\(error)")
        }
    }
    configure(conf)
    var errstr = [CChar](repeating: 0, count: 512)
    guard let client = rd_kafka_new(type, conf, &errstr, errstr.count) else {
        rd_kafka_conf_destroy(conf)
        retained.release()
        throw KafkaError(
            .clientCreation, "librdkafka could not create the client: \(config.redactor.redact(string(fromErrorBuffer: errstr)))")
    }
    return (client, retained)
}
