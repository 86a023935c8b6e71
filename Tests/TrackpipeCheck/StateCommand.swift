import ArgumentParser
import Benchmarking
import Foundation
import HitGenerator
import Kafka
import TrackpipeTestSupport

/// What window state costs the cluster on a live stream, per window size: every contender (this
/// build and `--baseline`, each with every `--window`) runs `trackpipe run` at the same time on
/// the same live input (one generator, `--rate` hits a second), each with its own group, state
/// topic and output, on one embedded broker in a process of its own. A consumer reads every
/// state topic as it is written and tallies the bytes written (keys and values) and the live
/// state (what compaction keeps: the last record of every key, unless it is a tombstone). At the
/// end each worker's peak RSS is read, every worker is killed with SIGKILL, and each is started
/// again with `--until-end`, alone: its restore (records read, seconds, from its log), and its
/// output against the generator's own reference.
struct StateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "state",
        abstract: "Live run per --window: state bytes written against live state, restore after SIGKILL, peak RSS (vs --baseline).")

    @Option(help: "Hits a second of the live stream.") var rate = 2_000.0
    @Option(help: "Distinct deliveries of the stream.") var deliveries = 4
    @Option(help: "Partitions of the input, repartition and state topics.") var partitions = 8
    @Option(help: "Seconds of live stream before the workers are killed.") var seconds = 150.0
    @Option(parsing: .upToNextOption, help: "Window sizes, each a contender (with each build).") var windows = ["1m", "1h", "1d"]
    @Option(help: "Rounds (each runs every contender at once on a fresh broker and stream).") var rounds = 1
    @Option(help: "The workers' --commit-interval.") var commitInterval = "5s"
    @Option(help: "Seed of the first round's stream (round n uses seed + n - 1).") var seed: UInt64 = 7
    @OptionGroup var builds: TrackpipeBuilds

    struct Contender {
        var build: String
        var binary: String
        var window: String
        var group: String
        var stateTopic: String { "\(group)-state" }
        var outputTopic: String { "\(group)-aggregates" }
        var deadLetterTopic: String { "\(group)-dlq" }
        var name: String { "\(build) --window \(window)" }
    }

    struct Measurement {
        var written = 0
        var writtenRecords = 0
        var live = 0
        var liveRecords = 0
        var peakRSS = 0
        var restoreRecords = 0
        var restoreSeconds = 0.0
        var restartSeconds = 0.0
        var mismatches = 0
        var expectedKeys = 0

        var ratio: Double { Double(written) / Double(max(1, live)) }
    }

    func run() throws {
        let (binary, baseline) = try builds.resolved()
        var results: [String: [Measurement]] = [:]
        var names: [String] = []
        print(
            "state benchmark: \(Int(rate)) hits/s over \(deliveries) deliveries, \(partitions) partitions, \(Int(seconds)) s live, --window \(windows.joined(separator: ", ")), --commit-interval \(commitInterval), \(rounds) round(s); every contender at once on the same stream"
        )
        for round in 1...rounds {
            let tag = UUID().uuidString.prefix(4).lowercased()
            var contenders: [Contender] = []
            for window in windows {
                contenders.append(Contender(build: "this build", binary: binary, window: window, group: "st\(tag)-new-\(window)"))
                if let baseline {
                    contenders.append(Contender(build: "baseline", binary: baseline, window: window, group: "st\(tag)-old-\(window)"))
                }
            }
            if names.isEmpty { names = contenders.map(\.name) }
            let measured = try measure(contenders, broker: binary, seed: seed + UInt64(round - 1))
            for (contender, measurement) in zip(contenders, measured) {
                results[contender.name, default: []].append(measurement)
                print(
                    String(
                        format: "  round %d %@: wrote %@ in %d records, live %@ in %d records: %.2f× the live state; peak RSS %.0f MB; restore after SIGKILL read %d records in %.2f s (restart to the end %.1f s); output %@",
                        round, contender.name, megabytes(measurement.written), measurement.writtenRecords, megabytes(measurement.live),
                        measurement.liveRecords, measurement.ratio, Double(measurement.peakRSS) / 1e6, measurement.restoreRecords,
                        measurement.restoreSeconds, measurement.restartSeconds,
                        measurement.mismatches == 0 ? "exact (\(measurement.expectedKeys) keys)" : "\(measurement.mismatches) of \(measurement.expectedKeys) keys differ"))
            }
        }
        print("medians over \(rounds) round(s):")
        for name in names {
            let rows = results[name] ?? []
            print(
                String(
                    format: "  %@: wrote %@, live %@, %.2f× the live state; peak RSS %.0f MB; restore %d records in %.2f s; %@",
                    name, megabytes(Int(BenchSupport.median(rows.map { Double($0.written) }))), megabytes(Int(BenchSupport.median(rows.map { Double($0.live) }))),
                    BenchSupport.median(rows.map(\.ratio)), BenchSupport.median(rows.map { Double($0.peakRSS) }) / 1e6,
                    Int(BenchSupport.median(rows.map { Double($0.restoreRecords) })), BenchSupport.median(rows.map(\.restoreSeconds)),
                    rows.allSatisfy { $0.mismatches == 0 } ? "every output exact" : "OUTPUT DIFFERS in \(rows.filter { $0.mismatches > 0 }.count) round(s)"))
        }
        if baseline != nil { compare(results) }
        // An output that differs from the reference fails the check, after the figures.
        if results.values.contains(where: { $0.contains { $0.mismatches > 0 } }) { throw ExitCode(1) }
    }

    /// This build against the baseline, per window size.
    func compare(_ results: [String: [Measurement]]) {
        for window in windows {
            let new = results["this build --window \(window)"] ?? []
            let old = results["baseline --window \(window)"] ?? []
            let written = zip(new, old).map { Double($0.written) / Double(max(1, $1.written)) }
            let rss = zip(new, old).map { Double($0.peakRSS) / Double(max(1, $1.peakRSS)) }
            print(
                String(
                    format: "--window %@, this build / baseline: state bytes written %.3f× (rounds %@), peak RSS %.2f×", window,
                    BenchSupport.median(written), written.map { String(format: "%.3f", $0) }.joined(separator: " "), BenchSupport.median(rss)))
        }
    }

    /// Milliseconds of a duration as the CLI takes it (`300ms`, `5s`, `1m`, `1h`, `1d`).
    static func milliseconds(_ text: String) -> Int64? {
        for (unit, scale) in [("ms", Int64(1)), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)] where text.hasSuffix(unit) {
            if let value = Int64(text.dropLast(unit.count)) { return value * scale }
        }
        return nil
    }

    func megabytes(_ bytes: Int) -> String { String(format: "%.2f MB", Double(bytes) / 1e6) }

    /// One round: every contender live at once, then each killed and restarted alone.
    func measure(_ contenders: [Contender], broker brokerBinary: String, seed: UInt64) throws -> [Measurement] {
        let broker = try BrokerProcess(
            binary: brokerBinary,
            topics: ["hits"] + contenders.flatMap { ["\($0.group)-repartition", $0.stateTopic, $0.outputTopic, $0.deadLetterTopic] },
            partitions: partitions)
        defer { broker.stop() }
        let tally = try StateTally(bootstrapServers: broker.bootstrapServers, topics: contenders.map(\.stateTopic), partitions: Int32(partitions))
        tally.start()
        let generator = try LiveProducer(bootstrapServers: broker.bootstrapServers, topic: "hits", rate: rate, seed: seed, deliveries: deliveries)
        var workers: [MetricsProcess] = []
        for contender in contenders { workers.append(try MetricsProcess(binary: contender.binary, arguments: arguments(contender, broker))) }
        defer { for worker in workers { worker.kill() } }
        generator.start()
        let start = BenchSupport.now()
        while BenchSupport.now() - start < seconds {
            Thread.sleep(forTimeInterval: min(30, seconds - (BenchSupport.now() - start)))
            for worker in workers where !worker.process.isRunning { throw BenchError("a worker exited (status \(worker.process.terminationStatus))") }
            let elapsed = Int(BenchSupport.now() - start)
            let line = zip(contenders, tally.snapshot()).map { "\($0.window)\($0.build == "baseline" ? "(old)" : ""): \(megabytes($1.written))/\(megabytes($1.live))" }
            print("    \(elapsed) s: written/live \(line.joined(separator: ", "))")
        }
        let hits = generator.stop()
        // What was counted before the stream stopped is in the state by the next commit.
        Thread.sleep(forTimeInterval: 2 * (Double(StateCommand.milliseconds(commitInterval) ?? 5_000) / 1000) + 1)
        var measurements = zip(contenders, tally.snapshot()).map { _, totals in
            Measurement(written: totals.written, writtenRecords: totals.writtenRecords, live: totals.live, liveRecords: totals.liveRecords)
        }
        for (index, worker) in workers.enumerated() {
            measurements[index].peakRSS = worker.peakResidentBytes()
            worker.kill()
        }
        tally.stop()
        for (index, contender) in contenders.enumerated() {
            let began = BenchSupport.now()
            let restart = Process()
            restart.executableURL = URL(fileURLWithPath: contender.binary)
            restart.arguments = arguments(contender, broker) + ["--until-end", "--log-level", "notice"]
            let errors = Pipe()
            restart.standardOutput = FileHandle.nullDevice
            restart.standardError = errors
            try restart.run()
            let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            restart.waitUntilExit()
            measurements[index].restartSeconds = BenchSupport.now() - began
            guard restart.terminationStatus == 0 else { throw BenchError("\(contender.name): the restart exited \(restart.terminationStatus): \(log.suffix(1_500))") }
            for line in log.split(separator: "\n") where line.contains("restored partition") {
                // "...: restored partition 3 from T: 12 records in 0.4 s (30/s)"
                let words = line.split(separator: " ")
                if let at = words.firstIndex(of: "records"), at > 0, let count = Int(words[at - 1]) { measurements[index].restoreRecords += count }
                if let at = words.firstIndex(of: "s"), at > 0, let seconds = Double(words[at - 1]) {
                    measurements[index].restoreSeconds = max(measurements[index].restoreSeconds, seconds)
                }
            }
            let reader = try KafkaConsumer(
                config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "reader-\(UUID())", "log_level": "3"]))
            let output = try reader.readToEnd(topic: contender.outputTopic, partitions: Int32(partitions))
            let contents = try TopicContents(
                output: output.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }).map { ($0.key, $0.value) })
            let reference = Corpus(hits).expected(windowSize: StateCommand.milliseconds(contender.window) ?? 60_000)
            measurements[index].mismatches = contents.mismatches(against: reference).count
            measurements[index].expectedKeys = reference.byKey.count
        }
        return measurements
    }

    func arguments(_ contender: Contender, _ broker: BrokerProcess) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--group", contender.group, "--window", contender.window,
            "--output-topic", contender.outputTopic, "--dlq-topic", contender.deadLetterTopic, "--commit-interval", commitInterval,
            "--log-level", "warning", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]
    }
}

/// Reads state topics as they are written, from their beginning: bytes and records written
/// (keys and values), and the live state, the last record of every key unless it is a tombstone.
final class StateTally: @unchecked Sendable {
    // @unchecked: `totals` and `latest` are touched by the reading thread and by `snapshot`,
    // always under `lock`; `consumer` only by the reading thread until `stop` has joined it.
    struct Totals {
        var written = 0
        var writtenRecords = 0
        var live = 0
        var liveRecords = 0
    }

    private let consumer: KafkaConsumer
    private let topics: [String]
    private let lock = NSLock()
    private var totals: [String: Totals] = [:]
    private var latest: [String: [Int32: [[UInt8]: Int]]] = [:]
    private let stopping = DispatchSemaphore(value: 0)
    private let stopped = DispatchSemaphore(value: 0)

    init(bootstrapServers: String, topics: [String], partitions: Int32) throws {
        self.topics = topics
        consumer = try KafkaConsumer(
            config: KafkaConfig(["bootstrap.servers": bootstrapServers, "group.id": "tally-\(UUID())", "log_level": "3", "enable.partition.eof": "false"]))
        try consumer.assign(topics.flatMap { topic in (0..<partitions).map { TopicPartitionOffset(topic: topic, partition: $0, offset: KafkaOffset.beginning) } })
    }

    func start() {
        let thread = Thread { [self] in
            while stopping.wait(timeout: .now()) == .timedOut {
                _ = consumer.poll(timeoutMilliseconds: 100) { event in
                    guard case .record(let record) = event else { return }
                    let key = record.key.map { Array($0) } ?? []
                    let size = key.count + (record.value?.count ?? 0)
                    lock.lock()
                    defer { lock.unlock() }
                    var total = totals[record.topic] ?? Totals()
                    total.written += size
                    total.writtenRecords += 1
                    let previous = latest[record.topic, default: [:]][record.partition, default: [:]][key]
                    if let previous {
                        total.live -= previous
                        total.liveRecords -= 1
                    }
                    if record.value != nil {
                        latest[record.topic, default: [:]][record.partition, default: [:]][key] = size
                        total.live += size
                        total.liveRecords += 1
                    } else {
                        latest[record.topic]?[record.partition]?[key] = nil
                    }
                    totals[record.topic] = total
                }
            }
            stopped.signal()
        }
        thread.start()
    }

    /// The totals so far, per topic in the order given.
    func snapshot() -> [Totals] {
        lock.lock()
        defer { lock.unlock() }
        return topics.map { totals[$0] ?? Totals() }
    }

    func stop() {
        stopping.signal()
        stopped.wait()
    }
}

extension MetricsProcess {
    /// The process's peak resident set (VmHWM), in bytes; 0 when it cannot be read.
    func peakResidentBytes() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
        else { return 0 }
        return kilobytes * 1024
    }
}
