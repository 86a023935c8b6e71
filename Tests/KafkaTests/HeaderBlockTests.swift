@testable import Kafka
import Synchronization
import Testing

@Suite("headers lent as bytes", .serialized)
struct HeaderBlockTests {
    /// Values of every kind: none, empty, text, bytes that are not text (NUL included), long.
    static let headers = [
        KafkaHeader(key: "none", value: nil), KafkaHeader(key: "empty", value: []), KafkaHeader(key: "text", string: "tooLate: late"),
        KafkaHeader(key: "binary", value: [0, 255, 0, 1]), KafkaHeader(key: "long", value: Array(repeating: 7, count: 70_000)),
    ]

    static func block(_ headers: [KafkaHeader]) -> [UInt8] {
        var bytes: [UInt8] = []
        for header in headers { KafkaHeaderBlock.append(header, to: &bytes) }
        return bytes
    }

    @Test("a block gives back the headers written into it, in order, names NUL-terminated where they lie")
    func roundTrip() {
        let bytes = Self.block(Self.headers)
        bytes.withUnsafeBytes { raw in
            let block = KafkaHeaderBlock(raw)
            #expect(block.headers == Self.headers)
            #expect(block.count == Self.headers.count)
            var names: [String] = []
            block.forEach { name, count, _ in
                #expect(name[count] == 0)
                names.append(String(cString: name))
            }
            #expect(names == Self.headers.map(\.key))
        }
        #expect(KafkaHeaderBlock(UnsafeRawBufferPointer(start: nil, count: 0)).headers.isEmpty)
    }

    @Test("a record sent with a block arrives with the same headers as one sent with them as values, and its report names its topic")
    func sentWithBlock() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("blocks", partitions: 1)
        let topics = Mutex<[String]>([])
        let producer = try KafkaProducer(
            config: KafkaTestSupport.producerConfig(broker), onDelivery: { report in topics.withLock { $0.append(report.topic) } })
        let topic = try producer.topic("blocks")
        let bytes = Self.block(Self.headers)
        try bytes.withUnsafeBytes { raw in
            try producer.send(to: topic, partition: 0, key: nil, value: UnsafeRawBufferPointer(start: nil, count: 0), headerBlock: KafkaHeaderBlock(raw))
        }
        try producer.send(to: topic, partition: 0, key: nil, value: UnsafeRawBufferPointer(start: nil, count: 0), headers: Self.headers)
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        #expect(topics.withLock { $0 } == ["blocks", "blocks"])

        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "blocks"))
        try consumer.subscribe(topics: ["blocks"])
        var received: [[KafkaHeader]] = []
        KafkaTestSupport.pollUntil(consumer, { received.append($0.headers) }, stop: { received.count == 2 })
        consumer.close()
        #expect(received.count == 2 && received.first == received.last)
        #expect(received.first?.map(\.key) == Self.headers.map(\.key))
    }
}
