import ArgumentParser
import Benchmarking
import Foundation
import HitGenerator
import Kafka
import RecordFormats
import TrackpipeTestSupport
import Windowing

/// What window state costs the cluster on a live stream, per window size: every contender (this
/// build and `--baseline`, each with every `--window`, one size or several from one pipeline
/// such as `1m,1h,1d`) runs `trackpipe run` at the same time on the same live input (one
/// generator, `--rate` hits a second), each with its own group, state topic and output (a topic
/// per size), on one embedded broker in a process of its own. A consumer reads every state
/// topic as it is written and tallies the bytes written (keys and values) and the live state
/// (what compaction keeps: the last record of every key, unless it is a tombstone), per size
/// (the size a window's key names; the task records apart). At the end each worker's peak RSS
/// is read, every worker is killed with SIGKILL, and each is started again with `--until-end`,
/// alone: its restore (records read, seconds, from its log), and each size's output against the
/// generator's own reference.
struct StateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "state",
        abstract: "Live run per --window: state bytes written against live state, restore after SIGKILL, peak RSS (vs --baseline).")

    @Option(help: "Hits a second of the live stream.") var rate = 2_000.0
    @Option(help: "Distinct deliveries of the stream.") var deliveries = 4
    @Option(help: "Partitions of the input, repartition and state topics.") var partitions = 8
    @Option(help: "Seconds of live stream before the workers are killed.") var seconds = 150.0
    @Option(parsing: .upToNextOption, help: "Window sizes, each a contender (with each build); several sizes of one pipeline as one, 1m,1h,1d.")
    var windows = ["1m", "1h", "1d"]
    @Option(help: "Rounds (each runs every contender at once on a fresh broker and stream).") var rounds = 1
    @Option(help: "The workers' --commit-interval.") var commitInterval = "5s"
    @Option(help: "Seed of the first round's stream (round n uses seed + n - 1).") var seed: UInt64 = 7
    @OptionGroup var builds: TrackpipeBuilds
    @Option(help: "Instead of a live run: the brokers of a run already made, whose --state-topic is read and tallied per size.")
    var brokers: String?
    @Option(help: "With --brokers: the state topic to read (its --partitions).") var stateTopic: String?

    struct Contender {
        var build: String
        var binary: String
        var window: String
        var group: String
        var stateTopic: String { "\(group)-state" }
        var deadLetterTopic: String { "\(group)-dlq" }
        var name: String { "\(build) --window \(window)" }
        /// `--window`'s sizes as written, and each size's output topic (`--output-topic`'s list).
        var sizes: [String] { window.split(separator: ",").map(String.init) }
        var outputTopics: [String] { sizes.count == 1 ? ["\(group)-aggregates"] : sizes.map { "\(group)-aggregates-\($0)" } }
        /// Each size's tally key: what its windows' keys in the state topic name (one size's keys
        /// name none).
        var tallied: [(size: String, key: Int64)] {
            sizes.count == 1 ? [(window, ChangelogRecord.unsized)] : sizes.map { ($0, StateCommand.milliseconds($0) ?? 0) }
        }
    }

    /// One size's share of a contender's state topic.
    struct SizeShare {
        var size: String
        var written = 0
        var live = 0
        var mismatches = 0
        var expectedKeys = 0
        var ratio: Double { Double(written) / Double(max(1, live)) }
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
        /// Of several sizes, each size's windows, and the task records they share.
        var sizes: [SizeShare] = []
        var taskWritten = 0
        var taskLive = 0

        var ratio: Double { Double(written) / Double(max(1, live)) }
    }

    func run() throws {
        if let brokers {
            guard let stateTopic else { throw ValidationError("--brokers reads a run's state topic: name it with --state-topic") }
            return try tally(brokers: brokers, stateTopic: stateTopic)
        }
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
                // A topic's name takes no comma.
                let named = window.replacingOccurrences(of: ",", with: "-")
                contenders.append(Contender(build: "this build", binary: binary, window: window, group: "st\(tag)-new-\(named)"))
                if let baseline {
                    contenders.append(Contender(build: "baseline", binary: baseline, window: window, group: "st\(tag)-old-\(named)"))
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
                for share in measurement.sizes {
                    print(
                        String(
                            format: "    %@: wrote %@, live %@: %.2f× the live state; output %@", share.size, megabytes(share.written), megabytes(share.live),
                            share.ratio, share.mismatches == 0 ? "exact (\(share.expectedKeys) keys)" : "\(share.mismatches) of \(share.expectedKeys) keys differ"))
                }
                if !measurement.sizes.isEmpty {
                    print("    task records (every size's): wrote \(megabytes(measurement.taskWritten)), live \(megabytes(measurement.taskLive))")
                }
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
            for (index, size) in (rows.first?.sizes ?? []).map(\.size).enumerated() {
                let shares = rows.map { $0.sizes[index] }
                print(
                    String(
                        format: "    %@: wrote %@, live %@, %.2f× the live state; %@", size,
                        megabytes(Int(BenchSupport.median(shares.map { Double($0.written) }))), megabytes(Int(BenchSupport.median(shares.map { Double($0.live) }))),
                        BenchSupport.median(shares.map(\.ratio)), shares.allSatisfy { $0.mismatches == 0 } ? "every output exact" : "OUTPUT DIFFERS"))
            }
        }
        if baseline != nil { compare(results) }
        // An output that differs from the reference fails the check, after the figures.
        if results.values.contains(where: { $0.contains { $0.mismatches > 0 } }) { throw ExitCode(1) }
    }

    /// A run already made: its state topic read from the beginning to its end, the bytes written
    /// against the live state (what compaction keeps), in all and per size.
    func tally(brokers: String, stateTopic: String) throws {
        let reader = try KafkaConsumer(config: KafkaConfig(["bootstrap.servers": brokers, "group.id": "tally-\(UUID())", "log_level": "3"]))
        let records = try reader.readToEnd(topic: stateTopic, partitions: Int32(partitions))
        let tally = try StateTally(bootstrapServers: brokers, topics: [stateTopic], partitions: 0)
        for record in records { tally.add(topic: stateTopic, partition: record.partition, key: record.key ?? [], valueBytes: record.value?.count) }
        let totals = tally.snapshot()[0]
        func line(_ label: String, _ total: StateTally.Totals) -> String {
            String(
                format: "  %@: wrote %@ in %d records, live %@ in %d records: %.2f× the live state", label, megabytes(total.written), total.writtenRecords,
                megabytes(total.live), total.liveRecords, Double(total.written) / Double(max(1, total.live)))
        }
        print("state topic \(stateTopic) on \(brokers), \(records.count) records:")
        print(line("in all", totals.all))
        for (size, total) in totals.bySize.sorted(by: { $0.key < $1.key }) {
            let label =
                size == StateTally.taskRecords ? "task records" : size == ChangelogRecord.unsized ? "windows (one size)" : "windows of \(Self.text(size))"
            var text = line(label, total)
            if let kept = totals.keptWindowsWritten[size] {
                // Windows past their retention are deleted: what was written for them is not
                // rewriting, and compaction keeps none of it.
                text += String(format: "; for the windows still kept, %@ written: %.2f×", megabytes(kept), Double(kept) / Double(max(1, total.live)))
            }
            print(text)
        }
    }

    /// A size as `--window` writes it.
    static func text(_ milliseconds: Int64) -> String {
        for (unit, scale) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] where milliseconds % scale == 0 {
            return "\(milliseconds / scale)\(unit)"
        }
        return "\(milliseconds)ms"
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
            topics: ["hits"] + contenders.flatMap { ["\($0.group)-repartition", $0.stateTopic, $0.deadLetterTopic] + $0.outputTopics },
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
            let line = zip(contenders, tally.snapshot()).map { "\($0.window)\($0.build == "baseline" ? "(old)" : ""): \(megabytes($1.all.written))/\(megabytes($1.all.live))" }
            print("    \(elapsed) s: written/live \(line.joined(separator: ", "))")
        }
        let hits = generator.stop()
        // What was counted before the stream stopped is in the state by the next commit.
        Thread.sleep(forTimeInterval: 2 * (Double(StateCommand.milliseconds(commitInterval) ?? 5_000) / 1000) + 1)
        var measurements = zip(contenders, tally.snapshot()).map { contender, totals in
            var measurement = Measurement(
                written: totals.all.written, writtenRecords: totals.all.writtenRecords, live: totals.all.live, liveRecords: totals.all.liveRecords)
            if contender.sizes.count > 1 {
                measurement.sizes = contender.tallied.map { size in
                    SizeShare(size: size.size, written: totals.bySize[size.key]?.written ?? 0, live: totals.bySize[size.key]?.live ?? 0)
                }
                measurement.taskWritten = totals.bySize[StateTally.taskRecords]?.written ?? 0
                measurement.taskLive = totals.bySize[StateTally.taskRecords]?.live ?? 0
            }
            return measurement
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
            // Each size's output against its own reference.
            for (number, (size, topic)) in zip(contender.sizes, contender.outputTopics).enumerated() {
                let reader = try KafkaConsumer(
                    config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "reader-\(UUID())", "log_level": "3"]))
                let output = try reader.readToEnd(topic: topic, partitions: Int32(partitions))
                let contents = try TopicContents(
                    output: output.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }).map { ($0.key, $0.value) })
                let reference = Corpus(hits).expected(windowSize: StateCommand.milliseconds(size) ?? 60_000)
                let mismatches = contents.mismatches(against: reference).count
                measurements[index].mismatches += mismatches
                measurements[index].expectedKeys += reference.byKey.count
                if measurements[index].sizes.indices.contains(number) {
                    measurements[index].sizes[number].mismatches = mismatches
                    measurements[index].sizes[number].expectedKeys = reference.byKey.count
                }
            }
        }
        return measurements
    }

    func arguments(_ contender: Contender, _ broker: BrokerProcess) -> [String] {
        [
            "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--group", contender.group, "--window", contender.window,
            "--output-topic", contender.outputTopics.joined(separator: ","), "--dlq-topic", contender.deadLetterTopic, "--commit-interval", commitInterval,
            "--log-level", "warning", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]
    }
}

/// Reads state topics as they are written, from their beginning: bytes and records written
/// (keys and values), and the live state, the last record of every key unless it is a tombstone;
/// in all, and per window size, the size a window's key names (`ChangelogRecord.unsized` for a
/// one-size pipeline's keys, `taskRecords` for the task records and any key it cannot read).
final class StateTally: @unchecked Sendable {
    // @unchecked: `totals` and `latest` are touched by the reading thread and by `snapshot`,
    // always under `lock`; `consumer` only by the reading thread until `stop` has joined it.
    struct Totals {
        var written = 0
        var writtenRecords = 0
        var live = 0
        var liveRecords = 0
    }

    /// A topic's totals, in all and per size; and per size, the bytes written for the windows
    /// whose head is live (not deleted since, as a window past its retention is): a window's
    /// rewrites and merged-away segments, without the windows that expired.
    struct TopicTotals {
        var all = Totals()
        var bySize: [Int64: Totals] = [:]
        var keptWindowsWritten: [Int64: Int] = [:]
    }

    static let taskRecords: Int64 = -1

    /// The window a state record's key names.
    static func window(ofKey key: [UInt8]) -> WindowKey? {
        switch ChangelogRecord.decodeKey(key) {
        case .head(let window)?, .segment(let window, _)?: window
        case .task?, nil: nil
        }
    }

    private let consumer: KafkaConsumer
    private let topics: [String]
    private let lock = NSLock()
    private var totals: [String: TopicTotals] = [:]
    private var latest: [String: [Int32: [[UInt8]: Int]]] = [:]
    /// Per topic and window (the partition's, as each task has its own): bytes written for it,
    /// and whether its head is live.
    private var windows: [String: [Int32: [WindowKey: (written: Int, headLive: Bool)]]] = [:]
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
                    add(topic: record.topic, partition: record.partition, key: record.key.map { Array($0) } ?? [], valueBytes: record.value?.count)
                }
            }
            stopped.signal()
        }
        thread.start()
    }

    /// One record read (`valueBytes` nil: a tombstone).
    func add(topic name: String, partition: Int32, key: [UInt8], valueBytes: Int?) {
        let size = key.count + (valueBytes ?? 0)
        let decoded = Self.window(ofKey: key)
        let window = decoded?.size ?? Self.taskRecords
        lock.lock()
        defer { lock.unlock() }
        var topic = totals[name] ?? TopicTotals()
        let previous = latest[name, default: [:]][partition, default: [:]][key]
        func add(_ total: inout Totals) {
            total.written += size
            total.writtenRecords += 1
            if let previous {
                total.live -= previous
                total.liveRecords -= 1
            }
            if valueBytes != nil {
                total.live += size
                total.liveRecords += 1
            }
        }
        add(&topic.all)
        add(&topic.bySize[window, default: Totals()])
        latest[name, default: [:]][partition, default: [:]][key] = valueBytes != nil ? size : nil
        totals[name] = topic
        if let decoded {
            var entry = windows[name, default: [:]][partition, default: [:]][decoded] ?? (0, false)
            entry.written += size
            if case .head? = ChangelogRecord.decodeKey(key) { entry.headLive = valueBytes != nil }
            windows[name, default: [:]][partition, default: [:]][decoded] = entry
        }
    }

    /// The totals so far, per topic in the order given.
    func snapshot() -> [TopicTotals] {
        lock.lock()
        defer { lock.unlock() }
        return topics.map { name in
            var topic = totals[name] ?? TopicTotals()
            for (window, entry) in (windows[name] ?? [:]).values.joined() where entry.headLive {
                topic.keptWindowsWritten[window.size, default: 0] += entry.written
            }
            return topic
        }
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
