@testable import Kafka
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

    /// What the in-place read relies on, checked on the library loaded (scripts/compat.sh runs
    /// this on a newer one): the byte after each value is the first byte of its header count,
    /// compressed batches (decompressed into a buffer of their own) included. A librdkafka that
    /// copied values out, or put anything between a value and its headers, fails here even
    /// where the byte it left happens to be nonzero.
    @Test(
        "the byte after a consumed value is its header count's first byte, plain and compressed",
        .enabled(if: Librdkafka.readsHeaderCountInPlace, "the loaded librdkafka is outside the checked versions: headerCount asks it"),
        arguments: ["none", "lz4"])
    func headerCountFollowsTheValue(compression: String) throws {
        let broker = try EmbeddedBroker()
        let topic = "header-layout-\(compression)"
        try broker.createTopic(topic, partitions: 1)
        let (producer, _) = try KafkaTestSupport.makeProducer(broker, extra: ["compression.type": compression])
        var expected: [String: Int] = [:]
        for size in [1, 7, 100, 4_000] {
            for count in [0, 1, 2, 63, 64, 200] {
                let key = "\(size)-\(count)"
                expected[key] = count
                let headers = (0..<count).map { KafkaHeader(key: "h\($0)", string: "v") }
                // Values of zeros: a stray zero byte after one would read as "no headers".
                try producer.send(
                    topic: topic, partition: 0, key: Array(key.utf8), value: [UInt8](repeating: 0, count: size), headers: headers)
            }
        }
        try producer.flush(timeoutMilliseconds: KafkaTestSupport.safetyMilliseconds)
        let consumer = try KafkaConsumer(config: KafkaTestSupport.consumerConfig(broker, group: topic))
        try consumer.subscribe(topics: [topic])
        var seen: [String: (byte: UInt8?, inPlace: Int, parsed: Int, copied: Int)] = [:]
        KafkaTestSupport.pollUntil(consumer, { record in
            seen[String(decoding: record.key!, as: UTF8.self)] = (
                record.byteAfterValue, record.headerCount, record.headerCountFromLibrdkafka, record.headers.count
            )
        }, stop: { seen.count == expected.count })
        consumer.close()
        #expect(seen.count == expected.count)
        var checkedBytes = 0
        for (key, count) in expected {
            guard let record = seen[key] else { continue }
            #expect(record.inPlace == count && record.parsed == count && record.copied == count, "\(key): \(record)")
            guard let byte = record.byte else { continue }
            checkedBytes += 1
            // A zigzag varint: one byte 2n below 64, a continuation byte (high bit set) from 64 on.
            let first = count < 64 ? UInt8(2 * count) : UInt8((2 * count) & 0x7F) | 0x80
            #expect(byte == first, "\(key): the byte after the value is \(byte), the header count's first byte is \(first)")
        }
        // Most values end inside a page: the layout was looked at, not skipped.
        #expect(checkedBytes > expected.count / 2, "only \(checkedBytes) of \(expected.count) bytes after a value were readable")
    }
}
