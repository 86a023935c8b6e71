import ArgumentParser
import Foundation
import HitGenerator
import Kafka
import TrackingDomain

/// `trackpipe generate`: realistic input for trying, demoing and load-testing the worker.
struct GenerateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate a realistic stream of raw tracking hits (JSON Lines on stdout, or into a Kafka topic).",
        discussion: """
            Every input shape (SDK context data, trackAction envelopes, iOS and Android push payloads, local
            notifications, postback URLs), SDK retry duplicates, out-of-order and late hits, deliveries with
            tracking off, and about 1% bad messages. The same --seed and --start give the same stream.

            Batch mode (the default): --count messages at once, their event times spread over --span. Without --start the batch ends at the present: it starts at now minus --span minus 63 s (a click or open comes up to 63 s after its notification is shown), so that no event time lies in the future and a worker running now counts every hit. Give --start for a batch that is the same on every run.

            Live mode (--rate, with --brokers): messages are produced as they happen, paced by the \
            clock, so event times follow the clock and a worker's windows close as time passes; it \
            runs until SIGINT or SIGTERM, or until --count messages if given.
            """)

    static let defaultCount = 10_000
    static let defaultSpan = "10m"

    // Optional, with the defaults in the help, so that live mode can tell an explicit --count
    // (a limit) from none (run until stopped), and refuse batch-only options instead of ignoring them.
    @Option(help: "Messages to generate (default: \(defaultCount)). With --rate: stop after this many (default: run until SIGINT or SIGTERM).")
    var count: Int?
    @Option(help: "Seed of the stream.") var seed: UInt64 = 1
    @Option(help: "Distinct deliveries.") var deliveries = 20
    @Option(
        help: "Event time of the first hit: RFC 3339, epoch ms, or 'now' (default: now minus --span minus 63 s, so that the batch ends at the present).")
    var start: String?
    @Option(help: "Event time the hits are spread over (10m, 2h; default: \(defaultSpan)).") var span: String?
    @Option(
        help: """
            Live mode: produce this many messages a second into --brokers, with event times following the clock, \
            until SIGINT or SIGTERM (or --count messages).
            """)
    var rate: Double?
    @Option(help: "Hits a day older than the rest, sent last (they come out as too_late).") var stale = 0
    @Option(help: "Kafka bootstrap servers; without it, JSON Lines go to stdout.") var brokers: String?
    @Option(help: "Topic to produce to (with --brokers).") var topic = "tracking-hits"
    @Option(name: .customShort("X"), help: ArgumentHelp("A librdkafka producer property key=value (repeatable).", valueName: "key=value"))
    var kafkaProperties: [String] = []

    func validate() throws {
        guard (count ?? 0) >= 0 else { throw ValidationError("--count must not be negative") }
        guard deliveries >= 1 else { throw ValidationError("--deliveries must be at least 1") }
        if let rate {
            // The generator holds the next half minute or so of messages (clicks come up to a
            // minute after their impression): bounded, so a typo cannot exhaust memory.
            guard rate > 0, rate <= 100_000 else {
                throw ValidationError("--rate must be a positive number of messages a second, at most 100000 (run several generators for more)")
            }
            guard brokers != nil else {
                throw ValidationError("--rate produces into Kafka and runs until stopped: give --brokers (for JSON Lines on stdout, use --count alone)")
            }
            guard start == nil, span == nil, stale == 0 else {
                throw ValidationError("--start, --span and --stale are for batch mode: with --rate, event times follow the clock")
            }
        } else {
            guard stale >= 0, stale <= batchCount else { throw ValidationError("--stale must be between 0 and --count") }
        }
    }

    private var batchCount: Int { count ?? Self.defaultCount }

    func run() throws {
        if let rate, let brokers {
            let tally = try produceLive(rate: rate, brokers: brokers)
            FileHandle.standardError.write(Data((summary(tally) + "\n").utf8))
            return
        }
        let stream = HitStream(try streamConfig(now: Self.nowMillis()))
        let hits = stream.generate()
        if let brokers {
            try produce(hits, brokers: brokers)
        } else {
            var out = Data()
            out.reserveCapacity(hits.count * 240)
            for hit in hits {
                out.append(contentsOf: hit.value)
                out.append(UInt8(ascii: "\n"))
            }
            FileHandle.standardOutput.write(out)
        }
        var tally = Tally()
        for hit in hits { tally.add(hit) }
        FileHandle.standardError.write(Data((summary(tally) + "\n").utf8))
    }

    /// The batch's settings; `now` (epoch ms) places the default start so that the batch ends
    /// at the present, because a fixed date made every hit too_late for a worker running now.
    func streamConfig(now: Int64) throws -> HitStreamConfig {
        let span = span ?? Self.defaultSpan
        let spanMillis: Int64
        do { spanMillis = try DurationText.milliseconds(span) } catch { throw ValidationError("--span: \(error)") }
        let startMillis: Int64
        switch start {
        case nil:
            startMillis = now - spanMillis - HitStream.interactionReach
        case "now":
            startMillis = now
        case let text?:
            if let millis = Int64(text) {
                startMillis = millis
            } else if let millis = RFC3339.parse(Array(text.utf8)) {
                startMillis = millis
            } else {
                throw ValidationError("--start \(text): use an RFC 3339 time (2026-11-22T10:00:00Z), epoch ms, or now")
            }
        }
        return HitStreamConfig(count: batchCount, seed: seed, deliveries: deliveries, start: startMillis, span: spanMillis, staleCount: stale)
    }

    private func produce(_ hits: [GeneratedHit], brokers: String) throws {
        let (producer, failures) = try makeProducer(brokers: brokers)
        for hit in hits {
            try producer.send(topic: topic, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
        }
        try finish(producer, failures: failures)
    }

    /// Sends each message once the clock reaches its arrival (see `LiveHitStream`), until a
    /// signal or `--count`. Falling behind (a slow broker) only delays messages: `send` waits
    /// for room, and what is due is sent on the next turn, event times still in the past.
    private func produceLive(rate: Double, brokers: String) throws -> Tally {
        let (producer, failures) = try makeProducer(brokers: brokers)
        let stopped = LockedValue(false)
        let signals = ShutdownSignal.install { _ in stopped.set(true) }
        defer { withExtendedLifetime(signals) {} }
        var stream = LiveHitStream(rate: rate, seed: seed, deliveries: deliveries, start: Self.nowMillis())
        let limit = count ?? Int.max
        var tally = Tally()
        while !stopped.get() && tally.total < limit && failures.get().isEmpty {
            for hit in stream.due(at: Self.nowMillis()) {
                guard tally.total < limit else { break }
                try producer.send(topic: topic, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
                tally.add(hit)
            }
            producer.poll()
            // Short naps, so that a signal is answered within 100 ms.
            let wait = min(max(stream.nextDue - Self.nowMillis(), 1), 100)
            usleep(useconds_t(wait * 1_000))
        }
        try finish(producer, failures: failures)
        return tally
    }

    private static func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private func makeProducer(brokers: String) throws -> (KafkaProducer, LockedValue<[String]>) {
        let config = KafkaConfig(["bootstrap.servers": brokers, "linger.ms": "20", "client.id": "trackpipe-generate"])
            .merging(KafkaConfig(try KafkaPropertyArguments.parse(kafkaProperties)))
        let failures = LockedValue<[String]>([])
        let producer = try KafkaProducer(config: config) { report in
            if let error = report.error { failures.update { $0.append("\(error)") } }
        }
        return (producer, failures)
    }

    private func finish(_ producer: KafkaProducer, failures: LockedValue<[String]>) throws {
        try producer.flush(timeoutMilliseconds: 120_000)
        if let first = failures.get().first {
            throw ValidationError("\(failures.get().count) messages were not delivered to \(topic): \(first)")
        }
    }

    struct Tally {
        var total = 0, counted = 0, off = 0, bad = 0, stale = 0

        mutating func add(_ hit: GeneratedHit) {
            total += 1
            switch hit.truth {
            case .counted: counted += 1
            case .trackingOff: off += 1
            case .rejected: bad += 1
            case .stale: stale += 1
            }
        }
    }

    private func summary(_ tally: Tally) -> String {
        let destination = brokers.map { "topic \(topic) on \($0)" } ?? "stdout"
        return "generate: \(tally.total) messages to \(destination): \(tally.counted) tracked hits, \(tally.off) with tracking off, \(tally.bad) bad, \(tally.stale) stale"
    }
}
