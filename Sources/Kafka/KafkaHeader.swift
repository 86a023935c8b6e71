/// A record header. Values are bytes because Kafka's are; `nil` is a header with no value.
public struct KafkaHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    public init(key: String, string: String) {
        self.init(key: key, value: Array(string.utf8))
    }

    /// The value as UTF-8 text, for headers that carry text.
    public var stringValue: String? { value.map { String(decoding: $0, as: UTF8.self) } }
}
