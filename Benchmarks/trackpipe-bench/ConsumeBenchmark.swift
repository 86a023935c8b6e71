import ArgumentParser
import Benchmarking
import Foundation
import Kafka

/// Raw consumption through the Kafka module against kcat on the same preloaded topic, same run:
/// the figure that says whether our binding costs anything over librdkafka itself.
struct ConsumeBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "consume", abstract: "Raw consume rate of the Kafka module vs kcat on the same embedded topic.")

    @Option(help: "Records to preload.") var count = 1_000_000
    @Option(help: "Partitions of the topic (the embedded broker keeps ~5 MB per partition).") var partitions = 32
    @Option(help: "Value size in bytes.") var size = 230
    @Option(help: "Alternating rounds of each contender.") var rounds = 3

    func run() throws {
        let broker = try EmbeddedBroker()
        let value = [UInt8](repeating: UInt8(ascii: "x"), count: size)
        print("preloading \(count) records of \(size) bytes into \(partitions) partitions...")
        try BenchSupport.preload(broker, topic: "bench", partitions: partitions, values: Array(repeating: value, count: count))

        var ours: [Double] = []
        var kcat: [Double] = []
        for round in 1...rounds {
            let kcatSeconds = try BenchSupport.timeKcat([
                "-C", "-b", broker.bootstrapServers, "-t", "bench", "-o", "beginning", "-e", "-q", "-f", "%o\\n",
            ])
            guard let kcatSeconds else { throw BenchError("kcat is not installed: apt-get install -y kcat") }
            kcat.append(kcatSeconds)
            let oursSeconds = try consumeAll(broker)
            ours.append(oursSeconds)
            print(
                "round \(round): kcat \(BenchSupport.rate(count, kcatSeconds)), trackpipe Kafka module \(BenchSupport.rate(count, oursSeconds))")
        }
        let ratio = BenchSupport.median(kcat) / BenchSupport.median(ours)
        print(
            "median: kcat \(BenchSupport.rate(count, BenchSupport.median(kcat))), ours \(BenchSupport.rate(count, BenchSupport.median(ours)))")
        print(String(format: "ratio (ours / kcat rate): %.2f  (target >= 0.90)", ratio))
    }

    /// Assigns every partition from the beginning (as kcat -C does) and reads until each
    /// partition's end, touching every value.
    private func consumeAll(_ broker: EmbeddedBroker) throws -> Double {
        let start = BenchSupport.now()
        let consumer = try KafkaConsumer(
            config: KafkaConfig([
                "bootstrap.servers": broker.bootstrapServers, "group.id": "bench-\(UUID().uuidString)",
                "enable.partition.eof": "true", "log_level": "3",
            ]))
        try consumer.assign((0..<Int32(partitions)).map { TopicPartitionOffset(topic: "bench", partition: $0, offset: KafkaOffset.beginning) })
        var received = 0
        var bytes = 0
        var ended = Set<Int32>()
        var firstAt = 0.0
        while ended.count < partitions {
            consumer.poll(timeoutMilliseconds: 100) { event in
                switch event {
                case .record(let record):
                    if received == 0 { firstAt = BenchSupport.now() }
                    received += 1
                    bytes &+= record.value?.count ?? 0
                case .partitionEOF(let tp, _): ended.insert(tp.partition)
                case .error: break
                }
            }
        }
        let elapsed = BenchSupport.now() - start
        guard received == count else { throw BenchError("read \(received) records, expected \(count)") }
        _ = bytes
        print(String(format: "  trackpipe: first record after %.3f s, all read %.3f s later", firstAt - start, elapsed - (firstAt - start)))
        return elapsed
    }
}

