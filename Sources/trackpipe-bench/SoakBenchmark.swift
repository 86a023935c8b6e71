import ArgumentParser
import Foundation
import HitGenerator
import Kafka
import TrackpipeTestSupport

/// A long run the way production treats a worker: a live stream, the worker killed with
/// SIGKILL at random moments and restarted, the broker down now and then. At the end the last
/// record per key must equal what the generator knows it sent, and the worker's memory must not
/// have grown. Not a CI test: it takes as long as you ask (scripts/soak.sh).
struct SoakBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak", abstract: "Live stream, random SIGKILLs and broker outages; exact counts and flat RSS at the end.")

    @Option(help: "Minutes of live stream.") var minutes = 20.0
    @Option(help: "SIGKILLs of the worker, at random moments over the run.") var kills = 20
    @Option(help: "Broker outages (5 s each), at random moments.") var outages = 4
    @Option(help: "Hits per second.") var rate = 300.0
    @Option(help: "Input partitions (the embedded broker keeps about 5 MB per partition).") var partitions = 32
    @Option(help: "Seed of the stream and of the random moments.") var seed: UInt64 = 7
    @Option(help: "Round-trip time (ms) of a second broker that leads every topic the worker writes: a slow output.")
    var slowOutputMs = 0
    @Option(help: "The workers' producer queue (queue.buffering.max.kbytes); they pause their input at half of it.")
    var queueKbytes: Int?
    @Option(help: "Path of the trackpipe binary (default: next to this one).") var trackpipe: String?

    func run() throws {
        let binary = try BenchSupport.trackpipeBinary(trackpipe)
        let broker = try EmbeddedBroker(brokers: slowOutputMs > 0 ? 2 : 1)
        // The embedded broker keeps only the newest ~5 MB of a partition: the repartition topic
        // (original messages plus events, plus re-sends after each kill) gets three times the
        // partitions, so that nothing a restarted worker must re-read is gone.
        for (topic, count) in [("hits", partitions), ("aggregates", 8), ("dlq", 4), ("soak-repartition", 3 * partitions), ("soak-state", 3 * partitions)] {
            try broker.createTopic(topic, partitions: count)
            for partition in 0..<count where slowOutputMs > 0 {
                try broker.setLeader(topic, partition: Int32(partition), brokerId: topic == "hits" ? 1 : 2)
            }
        }
        if slowOutputMs > 0 { try broker.setRoundTripTime(2, milliseconds: slowOutputMs) }
        var random = SplitMix64(seed: seed)
        let seconds = minutes * 60
        let start = BenchSupport.now()
        let killAt = (0..<kills).map { _ in Double(random.next() % UInt64(seconds * 1000)) / 1000 }.sorted()
        let outageAt = (0..<outages).map { _ in Double(random.next() % UInt64(seconds * 1000)) / 1000 }.sorted()
        print("soak: \(Int(seconds)) s of live stream at \(Int(rate))/s into \(partitions) partitions; \(kills) SIGKILLs, \(outages) broker outages")

        let generator = LiveProducer(broker: broker, rate: rate, seed: seed)
        generator.start()
        var worker = try Worker(binary: binary, broker: broker, queueKbytes: queueKbytes)
        var samples: [(elapsed: Double, incarnation: Int, age: Double, rssKiB: Int)] = []
        var pendingKills = killAt[...]
        var pendingOutages = outageAt[...]
        var incarnation = 1
        var lastSample = 0.0
        while BenchSupport.now() - start < seconds {
            let elapsed = BenchSupport.now() - start
            if let next = pendingKills.first, elapsed >= next {
                pendingKills.removeFirst()
                worker.kill()
                print(String(format: "%7.1f s: SIGKILL worker %d (RSS %d KiB at %.0f s old); restarting", elapsed, incarnation, worker.lastRSS, worker.age))
                worker = try Worker(binary: binary, broker: broker, queueKbytes: queueKbytes)
                incarnation += 1
            }
            if let next = pendingOutages.first, elapsed >= next {
                pendingOutages.removeFirst()
                print(String(format: "%7.1f s: broker down for 5 s", elapsed))
                try broker.setBrokerDown(1)
                Thread.sleep(forTimeInterval: 5)
                try broker.setBrokerUp(1)
            }
            if elapsed - lastSample >= 10, let rss = worker.rssKiB() {
                samples.append((elapsed, incarnation, worker.age, rss))
                lastSample = elapsed
            }
            if let code = worker.exitCode {
                print(String(format: "%7.1f s: worker %d exited by itself with %d: %@", elapsed, incarnation, code, worker.stderrTail))
                worker = try Worker(binary: binary, broker: broker, queueKbytes: queueKbytes)
                incarnation += 1
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        let hits = generator.stop()
        if slowOutputMs > 0 { try broker.setRoundTripTime(2, milliseconds: 0) }
        print(String(format: "stream over: %d hits in %.0f s; stopping the worker with SIGTERM and reading to the end", hits.count, BenchSupport.now() - start))
        worker.terminate()
        // Event time of the last windows must pass: the final run flushes every window.
        let final = try Worker(binary: binary, broker: broker, queueKbytes: queueKbytes, untilEnd: true)
        guard final.wait(seconds: 600) == 0 else { throw BenchError("the final --until-end run failed: \(final.stderrTail)") }

        let out = try TopicContents(broker: broker, output: "aggregates", outputPartitions: 8, dlq: "dlq", dlqPartitions: 4)
        let reference = Corpus(hits).expected(windowSize: 60_000)
        let last = out.mismatches(against: reference)
        let highest = out.mismatches(against: reference, highestRevision: true)
        print("RSS of the worker, sampled every 10 s (KiB):")
        print("  elapsed s  worker  age s   RSS KiB")
        for sample in samples {
            print(String(format: "  %9.0f  %6d  %5.0f  %8d", sample.elapsed, sample.incarnation, sample.age, sample.rssKiB))
        }
        let grown = samples.filter { $0.age >= 30 }.map(\.rssKiB)
        if let low = grown.min(), let high = grown.max() {
            print("RSS of workers at least 30 s old: \(low) to \(high) KiB")
        }
        print("output: \(out.outputRecords) records, \(reference.byKey.count) keys expected; last record per key differs for \(last.count), highest revision differs for \(highest.count)")
        for problem in last.prefix(5) { print("  \(problem)") }
        if !last.isEmpty || !highest.isEmpty { throw ExitCode(1) }
        print("soak: exact")
    }
}

/// The live stream, produced on a thread of its own; remembers every hit it sent.
final class LiveProducer: @unchecked Sendable {
    // @unchecked: `hits` and `stream` are touched only by the producing thread until `stop`
    // has joined it (the semaphore), after which only the caller reads `hits`.
    private let producer: KafkaProducer
    private let topic: String
    private var stream: LiveHitStream
    private var hits: [GeneratedHit] = []
    private let stopping = DispatchSemaphore(value: 0)
    private let stopped = DispatchSemaphore(value: 0)

    convenience init(broker: EmbeddedBroker, rate: Double, seed: UInt64) {
        self.init(bootstrapServers: broker.bootstrapServers, topic: "hits", rate: rate, seed: seed, deliveries: 20)
    }

    init(bootstrapServers: String, topic: String, rate: Double, seed: UInt64, deliveries: Int) {
        producer = try! KafkaProducer(
            config: KafkaConfig(["bootstrap.servers": bootstrapServers, "linger.ms": "5", "log_level": "0", "message.timeout.ms": "0"]))
        self.topic = topic
        stream = LiveHitStream(rate: rate, seed: seed, deliveries: deliveries, start: Int64(Date().timeIntervalSince1970 * 1000))
    }

    func start() {
        let thread = Thread { [self] in
            while stopping.wait(timeout: .now() + .milliseconds(100)) == .timedOut {
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                for hit in stream.due(at: now) {
                    try? producer.send(topic: topic, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
                    hits.append(hit)
                }
                producer.poll()
            }
            try? producer.flush(timeoutMilliseconds: 60_000)
            stopped.signal()
        }
        thread.start()
    }

    func stop() -> [GeneratedHit] {
        stopping.signal()
        stopped.wait()
        return hits
    }
}

/// One `trackpipe run` process of the soak.
struct Worker {
    let process = Process()
    let started = BenchSupport.now()
    private let errorFile: URL
    private(set) var lastRSS = 0

    init(binary: String, broker: EmbeddedBroker, queueKbytes: Int? = nil, untilEnd: Bool = false) throws {
        errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("soak-\(UUID().uuidString).err")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments =
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates",
                "--dlq-topic", "dlq", "--group", "soak", "--repartition-topic", "soak-repartition", "--log-level", "warning",
                "--commit-interval", "2s", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ] + (untilEnd ? ["--until-end"] : []) + (queueKbytes.map { ["-X", "queue.buffering.max.kbytes=\($0)"] } ?? [])
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: errorFile)
        try process.run()
    }

    var age: Double { BenchSupport.now() - started }
    var exitCode: Int32? { process.isRunning ? nil : process.terminationStatus }
    var stderrTail: String { String((try? String(contentsOf: errorFile, encoding: .utf8))?.suffix(1_000) ?? "") }

    mutating func rssKiB() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let value = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
        else { return nil }
        lastRSS = value
        return value
    }

    func kill() {
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    func terminate() {
        process.terminate()
        process.waitUntilExit()
    }

    func wait(seconds: Double) -> Int32? {
        let deadline = BenchSupport.now() + seconds
        while process.isRunning && BenchSupport.now() < deadline { Thread.sleep(forTimeInterval: 0.2) }
        return process.isRunning ? nil : process.terminationStatus
    }
}
