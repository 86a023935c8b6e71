import Kafka
import Testing

@Suite("header counts of consumed records", .serialized)
struct HeaderCountTests {
    @Test("a consumed record reports how many headers it carries, 0 without any, without copying them")
    func headerCounts() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("headers", partitions: 1)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        let counts = [0, 1, 3, 64, 65, 500]
        for count in counts {
            let headers = (0..<count).map { KafkaHeader(key: "h\($0)", string: "v") }
            try producer.send(topic: "headers", partition: 0, key: nil, value: Array("\(count)".utf8), headers: headers)
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "headers"))
        try consumer.subscribe(topics: ["headers"])
        var seen: [Int: Int] = [:]
        KafkaTestSupport.pollUntil(consumer, { record in
            seen[Int(String(decoding: record.value!, as: UTF8.self))!] = record.headerCount
        }, stop: { seen.count == counts.count })
        consumer.close()
        #expect(seen == Dictionary(uniqueKeysWithValues: counts.map { ($0, $0) }))
    }
}
