/// The broker's answer for one produced record. The `token` is the caller's own number, given
/// at `send`, so that a caller can track acknowledgements without a map from pointers.
public struct DeliveryReport: Sendable {
    public var token: UInt64
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var error: KafkaError?
    /// The record itself, for a record that was refused: a caller that can mend it (a dead
    /// letter cut to a size the topic takes) sends it again. nil for a delivered record, whose
    /// bytes nobody needs and which are therefore not copied.
    public var refused: RefusedRecord?

    package init(token: UInt64, topic: String, partition: Int32, offset: Int64, error: KafkaError?, refused: RefusedRecord? = nil) {
        self.token = token
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.error = error
        self.refused = refused
    }
}

/// A copy of a record the broker (or librdkafka) refused.
public struct RefusedRecord: Sendable, Equatable {
    public var key: [UInt8]?
    public var value: [UInt8]?
    public var headers: [KafkaHeader]
    public var timestamp: Int64?

    package init(key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader], timestamp: Int64?) {
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
    }
}
