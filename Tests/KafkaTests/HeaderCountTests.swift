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

    @Test("the count is right whatever the value: empty, absent (a tombstone), short or long, with a key or without")
    func headerCountsWhateverTheValue() throws {
        let broker = try EmbeddedBroker()
        try broker.createTopic("header-values", partitions: 1)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker)
        let values: [String: [UInt8]?] = ["empty": [], "absent": nil, "short": [0], "long": Array(repeating: 0, count: 5_000)]
        var expected: [String: Int] = [:]
        for (name, value) in values {
            for count in [0, 1, 2, 65] {
                let key = "\(name)-\(count)"
                expected[key] = count
                let headers = (0..<count).map { KafkaHeader(key: "h\($0)", value: $0 % 2 == 0 ? nil : [0]) }
                try producer.send(topic: "header-values", partition: 0, key: Array(key.utf8), value: value, headers: headers)
            }
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: "header-values"))
        try consumer.subscribe(topics: ["header-values"])
        var seen: [String: Int] = [:]
        KafkaTestSupport.pollUntil(consumer, { record in
            seen[String(decoding: record.key!, as: UTF8.self)] = record.headerCount
        }, stop: { seen.count == expected.count })
        consumer.close()
        #expect(seen == expected)
    }
}
