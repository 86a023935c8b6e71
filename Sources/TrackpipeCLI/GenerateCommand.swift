import ArgumentParser
import Foundation
import HitGenerator
import Kafka
import Logging
import TrackingDomain

/// `trackpipe generate`: realistic input for trying, demoing and load-testing the worker.
struct GenerateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Generate a realistic stream of raw tracking hits (JSON Lines on stdout, or into a Kafka topic).",
        discussion: """
            Every input shape (SDK context data, trackAction envelopes, iOS and Android push payloads, local notifications, postback URLs), SDK retry duplicates, out-of-order and late hits, deliveries with tracking off, and about 1% bad messages. The same --seed and --start give the same stream.

            Batch mode (the default): --count messages at once, their event times spread over --span. Without --start the batch ends at the present: it starts at now minus --span minus 63 s (a click or open comes up to 63 s after its notification is shown), so that no event time lies in the future and a worker running now counts every hit. Give --start for a batch that is the same on every run.

            Live mode (--rate, with --brokers): messages are produced as they happen, paced by the clock, so event times follow the clock and a worker's windows close as time passes; it runs until SIGINT or SIGTERM, or until --count messages if given.

            Into Kafka (--brokers), each message has \(defaultDeliveryTimeoutMillis / 1000) s to be delivered (librdkafka's message.timeout.ms; change it with -X message.timeout.ms=MS): against a broker that cannot be reached, generate gives up after that long, says how many messages were not delivered and exits 1. On SIGINT or SIGTERM it stops sending, waits for what is in flight as long as the broker keeps acknowledging it (\(drainAfterStopMillis / 1000) s without an acknowledgement ends the wait), prints its summary and exits 0.
            """)

    static let defaultCount = 10_000
    static let defaultSpan = "10m"
    /// How long a message may wait for delivery. librdkafka's own default is 5 minutes, so an
    /// unreachable broker kept generate silent for minutes; a reachable broker needs far less.
    static let defaultDeliveryTimeoutMillis = 15_000
    /// After a signal or the first failed delivery, how long to wait for the next
    /// acknowledgement of a message in flight: an answering broker sends one within this, an
    /// unreachable one never will.
    static let drainAfterStopMillis: Int64 = 2_000

    // Optional, with the defaults in the help, so that live mode can tell an explicit --count
    // (a limit) from none (run until stopped), and refuse batch-only options instead of ignoring them.
    @Option(help: "Messages to generate (default: \(defaultCount)). With --rate: stop after this many (default: run until SIGINT or SIGTERM).")
    var count: Int?
    @Option(help: "Seed of the stream.") var seed: UInt64 = 1
    @Option(help: "Distinct deliveries.") var deliveries = 20
    @Option(
        help: "Event time of the first hit: RFC 3339, epoch ms, or 'now' (default: now minus --span minus 63 s, so that the batch ends at the present).")
    var start: String?
    // Unconditional: `--span -5s` must reach the duration check instead of reading as a flag.
    @Option(parsing: .unconditional, help: "Event time the hits are spread over (10m, 2h; default: \(defaultSpan)).") var span: String?
    @Option(help: "Live mode: produce this many messages a second into --brokers, with event times following the clock, until SIGINT or SIGTERM (or --count messages).")
    var rate: Double?
    @Option(
        help:
            "Hits a day older than the rest, sent last: too_late for a worker whose event time is already past their windows' end plus --retention (a group that has processed the rest of the stream before they arrive); a new group that reads them together with the rest counts them."
    )
    var stale = 0
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
            _ = try streamConfig(now: 0)
        }
        let pairs = kafkaProperties.map { KafkaPropertyArguments.Pair($0) }
        let user = try KafkaPropertyArguments.parse(pairs: pairs)
        if let brokers {
            try KafkaPropertyArguments.check(pairs) { () throws(KafkaConfigProblem) in
                try KafkaTarget.config(brokers: brokers, user: user).check(as: .producer)
            }
        }
    }

    private var batchCount: Int { count ?? Self.defaultCount }

    func run() throws {
        // To stderr: stdout may be carrying the JSON Lines.
        LogSetup.bootstrap(
            level: .warning, format: .text, properties: (try? KafkaPropertyArguments.parse(kafkaProperties)) ?? [:], commandLine: kafkaProperties)
        let stopped = LockedValue<String?>(nil)
        let signals = ShutdownSignal.install { name in stopped.set(name) }
        defer { withExtendedLifetime(signals) {} }
        if let rate, let brokers {
            try produceLive(rate: rate, brokers: brokers, stopped: stopped)
            return
        }
        let hits = HitStream(try streamConfig(now: Self.nowMillis())).generate()
        if let brokers {
            try produceBatch(hits, brokers: brokers, stopped: stopped)
            return
        }
        var tally = Tally()
        var out = Data()
        out.reserveCapacity(min(hits.count, 10_000) * 240)
        // In chunks, so that a signal stops the output at a line boundary with a summary.
        for chunk in stride(from: 0, to: hits.count, by: 10_000) {
            if stopped.get() != nil { break }
            out.removeAll(keepingCapacity: true)
            for hit in hits[chunk..<min(chunk + 10_000, hits.count)] {
                out.append(contentsOf: hit.value)
                out.append(UInt8(ascii: "\n"))
                tally.add(hit)
            }
            FileHandle.standardOutput.write(out)
        }
        report(tally, planned: hits.count, stoppedBy: stopped.get())
    }

    /// The batch's settings; `now` (epoch ms) places the default start so that the batch ends
    /// at the present, because a fixed date made every hit too_late for a worker running now.
    func streamConfig(now: Int64) throws -> HitStreamConfig {
        let span = span ?? Self.defaultSpan
        let spanMillis: Int64
        do { spanMillis = try DurationText.milliseconds(span) } catch { throw ValidationError("--span \(span): \(error.reason)") }
        guard spanMillis > 0 else { throw ValidationError("--span must be longer than 0") }
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

    private func produceBatch(_ hits: [GeneratedHit], brokers: String, stopped: LockedValue<String?>) throws {
        let target = try KafkaTarget(brokers: brokers, topic: topic, properties: kafkaProperties)
        var tally = Tally()
        for hit in hits {
            if stopped.get() != nil || target.hasFailed { break }
            try target.send(hit)
            tally.add(hit)
        }
        let outcome = target.drain(stopped: stopped)
        report(tally, planned: hits.count, stoppedBy: stopped.get())
        try check(outcome, sent: tally.total)
    }

    /// Sends each message once the clock reaches its arrival (see `LiveHitStream`), until a
    /// signal or `--count`. Falling behind (a slow broker) only delays messages: `send` waits
    /// for room, and what is due is sent on the next turn, event times still in the past.
    private func produceLive(rate: Double, brokers: String, stopped: LockedValue<String?>) throws {
        let target = try KafkaTarget(brokers: brokers, topic: topic, properties: kafkaProperties)
        var stream = LiveHitStream(rate: rate, seed: seed, deliveries: deliveries, start: Self.nowMillis())
        let limit = count ?? Int.max
        var tally = Tally()
        while stopped.get() == nil && tally.total < limit && !target.hasFailed {
            for hit in stream.due(at: Self.nowMillis()) {
                guard tally.total < limit else { break }
                try target.send(hit)
                tally.add(hit)
            }
            target.producer.poll()
            // Short naps, so that a signal is answered within 100 ms.
            let wait = min(max(stream.nextDue - Self.nowMillis(), 1), 100)
            usleep(useconds_t(wait * 1_000))
        }
        let outcome = target.drain(stopped: stopped)
        // A signal is how live mode normally ends, so it is not reported as an interruption.
        report(tally, planned: nil, stoppedBy: nil)
        try check(outcome, sent: tally.total)
    }

    static func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private func report(_ tally: Tally, planned: Int?, stoppedBy signal: String?) {
        var text = summary(tally)
        if let signal, let planned, tally.total < planned {
            text += "\ngenerate: stopped by \(signal) after \(tally.total) of \(planned) messages"
        }
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// Exit 1 with what was lost, when any message was not delivered.
    private func check(_ outcome: KafkaTarget.Outcome, sent: Int) throws {
        guard outcome.undelivered > 0 else { return }
        let destination = "topic \(topic) on \(brokers ?? "")"
        let cause = outcome.firstError.map { ": \($0)" } ?? ": still unacknowledged when generate stopped waiting"
        FileHandle.standardError.write(
            Data(
                """
                generate: \(outcome.undelivered) of \(sent) messages were not delivered to \(destination)\(cause); is the broker reachable? \
                (each message waits up to \(outcome.timeoutMillis / 1000) s; -X message.timeout.ms=MS changes that)

                """.utf8))
        throw ExitCode(1)
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

/// generate's producer: counts failed deliveries and knows how long a message may wait, so that
/// an unreachable broker is reported in seconds, with how much was lost, instead of minutes.
final class KafkaTarget {
    /// `undelivered`: messages whose delivery failed, plus those still unacknowledged when
    /// waiting stopped.
    typealias Outcome = (undelivered: Int, firstError: String?, timeoutMillis: Int)

    let producer: KafkaProducer
    let topic: String
    /// librdkafka's message.timeout.ms in force (0 means no limit, as in librdkafka).
    let timeoutMillis: Int
    /// Failed deliveries, and the first one's error.
    private let failures = LockedValue<(count: Int, first: String?)>((0, nil))

    init(brokers: String, topic: String, properties: [String]) throws {
        let user = try KafkaPropertyArguments.parse(properties)
        // delivery.timeout.ms is librdkafka's alias of message.timeout.ms.
        timeoutMillis =
            (user["message.timeout.ms"] ?? user["delivery.timeout.ms"]).flatMap { Int($0) }
            ?? GenerateCommand.defaultDeliveryTimeoutMillis
        let failures = failures
        producer = try KafkaProducer(config: Self.config(brokers: brokers, user: user)) { report in
            guard let error = report.error else { return }
            failures.update {
                $0.count += 1
                if $0.first == nil { $0.first = "\(error)" }
            }
        }
        self.topic = topic
    }

    /// The producer's configuration: trackpipe's defaults, then the user's `-X`.
    static func config(brokers: String, user: [String: String]) -> KafkaConfig {
        KafkaConfig([
            "bootstrap.servers": brokers, "linger.ms": "20", "client.id": "trackpipe-generate",
            "message.timeout.ms": "\(GenerateCommand.defaultDeliveryTimeoutMillis)",
        ]).merging(KafkaConfig(user))
    }

    var hasFailed: Bool { failures.get().count > 0 }

    func send(_ hit: GeneratedHit) throws {
        try producer.send(topic: topic, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
    }

    /// Waits for the messages in flight: as long as librdkafka may still deliver them (the
    /// timeout, plus a margin for its once-a-second timeout scan). Once a signal came or a
    /// delivery failed, only while the broker keeps acknowledging: a broker that has answered
    /// nothing for `drainAfterStopMillis` would let the rest fail the same way, whereas one
    /// that answers slowly (a busy cluster, a loaded machine) still gets every message.
    func drain(stopped: LockedValue<String?>) -> Outcome {
        let now = GenerateCommand.nowMillis
        let deadline = timeoutMillis == 0 ? Int64.max : now() + Int64(timeoutMillis) + 2_000
        var outstanding = producer.outstanding
        var lastAcknowledged = now()
        while outstanding > 0 && now() < deadline {
            if (stopped.get() != nil || hasFailed) && now() - lastAcknowledged >= GenerateCommand.drainAfterStopMillis { break }
            producer.poll(timeoutMilliseconds: 100)
            let left = producer.outstanding
            if left < outstanding { lastAcknowledged = now() }
            outstanding = left
        }
        let failed = failures.get()
        return (failed.count + producer.outstanding, failed.first, timeoutMillis)
    }
}
