import ArgumentParser
import Benchmarking
import Foundation
import Kafka

/// How closely `trackpipe generate --rate` keeps the rate it is asked for, seen from outside as
/// records reaching the topic. The tests only check that records come live with event times
/// following the clock; a rate is a figure of the machine, so it is measured here, against the
/// clock it is meant to follow.
struct GenerateBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate", abstract: "Pacing of trackpipe generate --rate: records reaching the topic per second vs the rate asked for.")

    @Option(help: "Messages a second to ask for.") var rate = 500.0
    @Option(help: "Seconds of each round (its --count is rate x seconds).") var seconds = 10.0
    @Option(help: "Rounds.") var rounds = 3
    @Option(help: "The trackpipe binary (default: the one built next to this benchmark).") var trackpipe: String?

    func validate() throws {
        guard rate > 0, seconds > 0, rounds >= 1, rate * seconds >= 10 else {
            throw ValidationError("--rate and --seconds must be positive and give at least 10 messages; --rounds at least 1")
        }
    }

    func run() throws {
        let binary = try BenchSupport.trackpipeBinary(trackpipe)
        let count = Int(rate * seconds)
        var ratios: [Double] = []
        for round in 1...rounds {
            let pace = try measure(binary: binary, count: count)
            ratios.append(pace.rate / rate)
            print(
                String(
                    format: "round %d: first record after %.2f s, then %.0f msg/s until the last (%.3f of --rate %.0f); whole run %.2f s",
                    round, pace.firstAfter, pace.rate, pace.rate / rate, rate, pace.total))
        }
        print(String(format: "median ratio (records per second reaching the topic / --rate): %.3f  (target 1.00 +- 0.05)", BenchSupport.median(ratios)))
    }

    /// One run of `generate --rate --count` into a fresh embedded broker, its topic's size
    /// sampled every 100 ms. The rate is taken from the first record to the last, so that
    /// process start-up and the final wait for acknowledgements do not count.
    private func measure(binary: String, count: Int) throws -> (firstAfter: Double, rate: Double, total: Double) {
        let partitions: Int32 = 4
        let broker = try EmbeddedBroker()
        try broker.createTopic("paced", partitions: Int(partitions))
        let watcher = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "pace", "log_level": "3"]))
        func produced() throws -> Int64 {
            try (0..<partitions).map { try watcher.watermarks(TopicPartition(topic: "paced", partition: $0)).high }.reduce(0, +)
        }
        let process = BenchSupport.process(
            binary,
            ["generate", "--rate", "\(rate)", "--count", "\(count)", "--brokers", broker.bootstrapServers, "--topic", "paced", "-X", "log_level=3"])
        let start = BenchSupport.now()
        try process.run()
        var samples: [(at: Double, records: Int64)] = []
        while process.isRunning {
            samples.append((BenchSupport.now(), try produced()))
            usleep(100_000)
        }
        process.waitUntilExit()
        samples.append((BenchSupport.now(), try produced()))
        guard process.terminationStatus == 0 else { throw BenchError("trackpipe generate exited with \(process.terminationStatus)") }
        guard let first = samples.first(where: { $0.records > 0 }), let last = samples.first(where: { $0.records >= count }),
            last.at > first.at
        else { throw BenchError("the topic never held the \(count) messages generate sent (\(samples.last?.records ?? 0))") }
        let rate = Double(last.records - first.records) / (last.at - first.at)
        return (first.at - start, rate, samples[samples.count - 1].at - start)
    }
}
