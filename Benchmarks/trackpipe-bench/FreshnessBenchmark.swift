import ArgumentParser
import Benchmarking
import Foundation
import Kafka
import Pipeline
import Runner
import TrackingDomain

/// How soon a closed window can be read: a live `trackpipe run` fed by `trackpipe generate
/// --rate` with event times following the clock, on an embedded broker in a process of its own.
/// A window is final at its end plus the grace; the figure is the time from then to the moment
/// its first record was produced (the record's timestamp, set by the worker's producer), over
/// every (delivery, window) whose end falls inside the measured span.
///
/// With `--baseline`, an earlier build runs beside this one on the same input at the same time
/// (its own group and output topic): both see the same hits at the same moment of the machine.
struct FreshnessBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "freshness",
        abstract: "Live run: delay from a window's end plus grace to its first record, median and largest (--baseline beside it).")

    @Option(help: "Hits a second (generate --rate).") var rate = 1_000.0
    @Option(help: "Partitions of every topic.") var partitions = 8
    @Option(help: "Distinct deliveries.") var deliveries = 20
    @Option(help: "Window size passed to run (--window).") var window = "1m"
    @Option(help: "Grace passed to run (--grace), in seconds.") var graceSeconds = 10
    @Option(help: "Window closes to measure (each waits for a whole window).") var windows = 3
    @OptionGroup var builds: TrackpipeBuilds
    @Option(parsing: .singleValue, help: "Extra argument for every trackpipe run (repeatable), e.g. --commit-interval=5s.")
    var runArgument: [String] = []

    func validate() throws {
        guard rate > 0, partitions > 0, deliveries > 0, windows > 0, graceSeconds >= 0 else {
            throw ValidationError("--rate, --partitions, --deliveries and --windows must be positive, --grace-seconds not negative")
        }
    }

    func run() throws {
        let (binary, base) = try builds.resolved()
        guard let windowMillis = Self.millis(window) else { throw ValidationError("--window: say 30s, 1m or 5m") }
        let contenders: [(name: String, binary: String)] = [("this build", binary)] + (base.map { [("baseline", $0)] } ?? [])
        let topics = ["tracking-hits"] + contenders.indices.flatMap { ["out-\($0)", "dlq-\($0)", "fresh-\($0)-repartition", "fresh-\($0)-state"] }
        let broker = try BrokerProcess(binary: binary, topics: topics, partitions: partitions)
        defer { broker.stop() }
        print("embedded broker at \(broker.bootstrapServers); \(partitions) partitions; \(rate) hits/s over \(deliveries) deliveries")

        var workers: [Process] = []
        defer {
            for worker in workers where worker.isRunning { worker.terminate() }
            for worker in workers { worker.waitUntilExit() }
        }
        for (index, contender) in contenders.enumerated() {
            let arguments = [
                "run", "--brokers", broker.bootstrapServers, "--group", "fresh-\(index)", "--output-topic", "out-\(index)",
                "--dlq-topic", "dlq-\(index)", "--window", window, "--grace", "\(graceSeconds)s", "--log-level", "warning",
                "--progress-interval", "0s", "-X", "session.timeout.ms=6000",
            ] + runArgument
            workers.append(try Self.start(contender.binary, arguments, log: "/tmp/trackpipe-freshness-\(index).log"))
            print("\(contender.name): \(contender.binary) \(arguments.joined(separator: " "))")
        }
        let generator = try Self.start(
            binary,
            ["generate", "--rate", "\(rate)", "--deliveries", "\(deliveries)", "--brokers", broker.bootstrapServers, "--topic", "tracking-hits",
             "-X", "log_level=3", "-X", "message.timeout.ms=0"],
            log: "/tmp/trackpipe-freshness-generate.log")
        workers.append(generator)

        // Windows whose end comes after the workers had time to join their groups: the first
        // window closes at the first boundary at least 20 s from now.
        let startedAt = wallClockMillis()
        let firstEnd = ((startedAt + 20_000) / windowMillis + 1) * windowMillis
        let lastEnd = firstEnd + Int64(windows - 1) * windowMillis
        let grace = Int64(graceSeconds) * 1000
        let deadline = lastEnd + grace + 30_000
        print(String(format: "measuring the windows ending %@ to %@ (about %.0f s)", RFC3339.format(epochMillis: firstEnd), RFC3339.format(epochMillis: lastEnd), Double(deadline - startedAt) / 1000))

        var readers = try contenders.indices.map { try OutputReader(bootstrapServers: broker.bootstrapServers, topic: "out-\($0)", partitions: partitions) }
        while wallClockMillis() < deadline {
            for index in readers.indices { try readers[index].poll(ends: firstEnd...lastEnd) }
            if readers.allSatisfy({ $0.firstRecords.count >= deliveries * windows }) { break }
            for worker in workers where !worker.isRunning {
                throw BenchError("\(worker.arguments?.first ?? "a process") exited early with \(worker.terminationStatus): see /tmp/trackpipe-freshness-*.log")
            }
        }
        for (index, contender) in contenders.enumerated() {
            let delays = readers[index].firstRecords.values.map { Double($0.producedAt - ($0.windowEnd + grace)) / 1000 }.sorted()
            guard let smallest = delays.first, let largest = delays.last else {
                throw BenchError("\(contender.name): no record of the measured windows arrived")
            }
            let byWindow = Dictionary(grouping: readers[index].firstRecords.values, by: \.windowEnd).keys.count
            print(
                String(
                    format: "%@: %d first records of %d windows: delay from end + grace to produce: median %.2f s, largest %.2f s, smallest %.2f s (target: median <= 0.5 s, largest <= 1 s)",
                    contender.name, delays.count, byWindow, BenchSupport.median(delays), largest, smallest))
        }
    }

    private static func start(_ binary: String, _ arguments: [String], log: String) throws -> Process {
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        let process = BenchSupport.process(binary, arguments, output: handle, errors: handle)
        try process.run()
        return process
    }


    static func millis(_ text: String) -> Int64? {
        guard let unit = text.last, let value = Int64(text.dropLast()) else { return nil }
        switch unit {
        case "s": return value * 1000
        case "m": return value * 60_000
        default: return nil
        }
    }
}

/// Reads an output topic from its beginning, keeping the first record of each key.
private struct OutputReader {
    typealias First = (windowEnd: Int64, producedAt: Int64)

    let consumer: KafkaConsumer
    private(set) var firstRecords: [String: First] = [:]

    init(bootstrapServers: String, topic: String, partitions: Int) throws {
        consumer = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": bootstrapServers, "group.id": "freshness-reader", "log_level": "3", "enable.auto.commit": "false"]))
        try consumer.assign((0..<partitions).map { TopicPartitionOffset(TopicPartition(topic: topic, partition: Int32($0)), offset: KafkaOffset.beginning) })
    }

    mutating func poll(ends: ClosedRange<Int64>) throws {
        var found: [(String, First)] = []
        consumer.poll(timeoutMilliseconds: 100) { event in
            guard case .record(let record) = event, let key = record.key, let value = record.value, let producedAt = record.timestamp else { return }
            let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any]
            guard let end = (object?["windowEnd"] as? String).flatMap({ RFC3339.parse(Array($0.utf8)) }), ends.contains(end) else { return }
            found.append((String(decoding: key, as: UTF8.self), (windowEnd: end, producedAt: producedAt)))
        }
        for (key, first) in found where firstRecords[key] == nil { firstRecords[key] = first }
    }
}
