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
            tracking off, and about 1% bad messages. The same --seed gives the same stream.
            """)

    @Option(help: "Messages to generate.") var count = 10_000
    @Option(help: "Seed of the stream.") var seed: UInt64 = 1
    @Option(help: "Distinct deliveries.") var deliveries = 20
    @Option(help: "Event time of the first hit: RFC 3339, epoch ms, or 'now'.") var start = "2026-11-22T10:00:00Z"
    @Option(help: "Event time the hits are spread over (10m, 2h).") var span = "10m"
    @Option(help: "Hits a day older than the rest, sent last (they come out as too_late).") var stale = 0
    @Option(help: "Kafka bootstrap servers; without it, JSON Lines go to stdout.") var brokers: String?
    @Option(help: "Topic to produce to (with --brokers).") var topic = "tracking-hits"
    @Option(name: .customShort("X"), help: ArgumentHelp("A librdkafka producer property key=value (repeatable).", valueName: "key=value"))
    var kafkaProperties: [String] = []

    func validate() throws {
        guard count >= 0 else { throw ValidationError("--count must not be negative") }
        guard deliveries >= 1 else { throw ValidationError("--deliveries must be at least 1") }
        guard stale >= 0, stale <= count else { throw ValidationError("--stale must be between 0 and --count") }
    }

    func run() throws {
        let stream = HitStream(try streamConfig())
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
        FileHandle.standardError.write(Data((summary(hits) + "\n").utf8))
    }

    func streamConfig() throws -> HitStreamConfig {
        let startMillis: Int64
        if start == "now" {
            startMillis = Int64(Date().timeIntervalSince1970 * 1000)
        } else if let millis = Int64(start) {
            startMillis = millis
        } else if let millis = RFC3339.parse(Array(start.utf8)) {
            startMillis = millis
        } else {
            throw ValidationError("--start \(start): use an RFC 3339 time (2026-11-22T10:00:00Z), epoch ms, or now")
        }
        let spanMillis: Int64
        do { spanMillis = try DurationText.milliseconds(span) } catch { throw ValidationError("--span: \(error)") }
        return HitStreamConfig(count: count, seed: seed, deliveries: deliveries, start: startMillis, span: spanMillis, staleCount: stale)
    }

    private func produce(_ hits: [GeneratedHit], brokers: String) throws {
        var config = KafkaConfig(["bootstrap.servers": brokers, "linger.ms": "20", "client.id": "trackpipe-generate"])
        for pair in kafkaProperties {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { throw ValidationError("-X \(pair): expected key=value") }
            config[String(parts[0])] = String(parts[1])
        }
        let failures = LockedValue<[String]>([])
        let producer = try KafkaProducer(config: config) { report in
            if let error = report.error { failures.update { $0.append("\(error)") } }
        }
        for hit in hits {
            try producer.send(topic: topic, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
        }
        try producer.flush(timeoutMilliseconds: 120_000)
        if let first = failures.get().first {
            throw ValidationError("\(failures.get().count) messages were not delivered to \(topic): \(first)")
        }
    }

    private func summary(_ hits: [GeneratedHit]) -> String {
        var counted = 0, off = 0, bad = 0, staleHits = 0
        for hit in hits {
            switch hit.truth {
            case .counted: counted += 1
            case .trackingOff: off += 1
            case .rejected: bad += 1
            case .stale: staleHits += 1
            }
        }
        let destination = brokers.map { "topic \(topic) on \($0)" } ?? "stdout"
        return "generate: \(hits.count) messages to \(destination): \(counted) tracked hits, \(off) with tracking off, \(bad) bad, \(staleHits) stale"
    }
}
