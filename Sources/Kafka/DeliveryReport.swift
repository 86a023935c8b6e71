/// The broker's answer for one produced record. The `token` is the caller's own number, given
/// at `send`, so that a caller can track acknowledgements without a map from pointers.
public struct DeliveryReport: Sendable {
    public var token: UInt64
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var error: KafkaError?
}
