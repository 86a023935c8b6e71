import ArgumentParser
import Foundation
import HitGenerator
import Kafka
import Logging
import Pipeline
import RecordFormats
import Runner
import TrackingDomain
import Windowing

/// `trackpipe demo`: the whole product in one command, with nothing to install or configure:
/// an embedded Kafka, a generated stream of every hit shape, the worker run to the end, and
/// the results read back from the output topics as a person would look at them.
struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the worker end to end on an embedded Kafka with generated hits and print the results.")

    @Option(help: "Hits to generate.") var count = 20_000
    @Option(help: "Distinct deliveries (every fourth has tracking off).") var deliveries = 5
    // Unconditional: `--window -5s` must reach the duration check instead of reading as a flag.
    @Option(parsing: .unconditional, help: "Window size.") var window = "5m"
    @Option(help: "Seed of the generated stream.") var seed: UInt64 = 7
    @Option(help: "Partitions of the input topic.") var partitions = 8

    /// Checked before the broker starts: a topic of 0 partitions or a stream without
    /// deliveries used to surface 30 s later as a flush timeout that blamed the broker.
    func validate() throws {
        guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        guard deliveries >= 1 else { throw ValidationError("--deliveries must be at least 1") }
        guard partitions >= 1 else { throw ValidationError("--partitions must be at least 1") }
        _ = try windowMillis()
    }

    private func windowMillis() throws -> Int64 {
        let millis: Int64
        do { millis = try DurationText.milliseconds(window) } catch { throw ValidationError("--window \(window): \(error.reason)") }
        guard millis > 0 else { throw ValidationError("--window must be longer than 0") }
        return millis
    }

    /// What `run` counts in by default, stated next to the demo's own window so that nobody
    /// carries the demo's 5 minutes over to their own deployment unawares.
    static let runDefaultWindow = "1m"

    func run() throws {
        // First, so that a Ctrl-C at any moment stops the demo the same way: whatever runs
        // stops (the worker finishes its batch), and the demo exits 130 (143 for SIGTERM), as a
        // shell reports an interrupted command, instead of 0 as if it had shown everything.
        let interruption = LockedValue<String?>(nil)
        let running = LockedValue<Pipeline?>(nil)
        let signals = ShutdownSignal.install { name in
            interruption.set(name)
            FileHandle.standardError.write(Data("trackpipe demo: \(name) received, stopping\n".utf8))
            running.get()?.requestStop()
        }
        defer { withExtendedLifetime(signals) {} }
        func stopIfInterrupted() throws {
            guard let name = interruption.get() else { return }
            FileHandle.standardError.write(Data("trackpipe demo: interrupted; nothing more is shown\n".utf8))
            throw ExitCode(name == "SIGTERM" ? 143 : 130)
        }

        LogSetup.bootstrap(level: .warning, format: .text)
        let windowMillis = try windowMillis()
        let out = Console()
        out.line("trackpipe demo: \(count) generated hits -> embedded Kafka -> trackpipe run --until-end -> read back")
        out.line("")

        let broker = try EmbeddedBroker()
        let input = "tracking-hits", output = "tracking-aggregates", dlq = "tracking-hits-dlq"
        try broker.createTopic(input, partitions: partitions)
        try broker.createTopic(output, partitions: 4)
        try broker.createTopic(dlq, partitions: 2)
        // trackpipe creates its repartition topic itself where the cluster allows; the embedded
        // broker cannot create topics on request, so the demo makes it here.
        try broker.createTopic("trackpipe-demo-repartition", partitions: partitions)
        try broker.createTopic("trackpipe-demo-state", partitions: partitions)
        out.line("1. embedded Kafka on \(broker.bootstrapServers): \(input) (\(partitions) partitions), \(output), \(dlq)")
        try stopIfInterrupted()

        let stream = HitStreamConfig(count: count, seed: seed, deliveries: deliveries, trackingOffEvery: 4)
        let hits = HitStream(stream).generate()
        // Every client is scoped to close before the broker stops, so none logs a lost connection.
        do {
            let producer = try KafkaProducer(config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "linger.ms": "10"]))
            for (index, hit) in hits.enumerated() {
                if index % 1_000 == 0 { try stopIfInterrupted() }
                try producer.send(topic: input, key: hit.key, value: hit.value, timestamp: hit.kafkaTimestamp)
            }
            try producer.flush()
        }
        out.line("2. produced \(hits.count) hits: every shape, SDK retry duplicates, late hits, tracking-off deliveries, bad messages")
        try stopIfInterrupted()

        var config = PipelineConfig()
        config.brokers = broker.bootstrapServers
        config.window = WindowConfig(size: windowMillis)
        config.untilEnd = true
        config.shards = 2
        config.group = "trackpipe-demo"
        // The embedded broker does not delete records: a purge would only be refused (and say so).
        config.purgeInterval = 0
        let pipeline = Pipeline(config: config, logger: Logger(label: "trackpipe"))
        running.set(pipeline)
        let summary = try pipeline.run()
        running.set(nil)
        try stopIfInterrupted()
        out.line(
            "3. trackpipe ran to the end of the topic in \(summary.elapsedMilliseconds) ms, counting in windows of \(window) (--window; trackpipe run counts in \(Self.runDefaultWindow) windows unless told otherwise)"
        )
        out.line("")

        let (aggregates, letters) = try {
            let reader = try KafkaConsumer(
                config: KafkaConfig(["bootstrap.servers": broker.bootstrapServers, "group.id": "trackpipe-demo-reader"]))
            defer { reader.close() }
            return (try reader.readToEnd(topic: output, partitions: 4), try reader.readToEnd(topic: dlq, partitions: 2))
        }()
        try stopIfInterrupted()
        printTable(aggregates, stream: stream, out: out)
        printDeadLetters(letters, aggregates: aggregates.count, summary: summary, out: out)
        printNextSteps(out: out)
        withExtendedLifetime(broker) {}
    }

    private func printTable(_ records: [StoredRecord], stream: HitStreamConfig, out: Console) {
        // The last record per key holds the full counts; earlier ones are superseded revisions.
        var last: [String: [String: Any]] = [:]
        var order: [String] = []
        for record in records.sorted(by: { ($0.partition, $0.offset) < ($1.partition, $1.offset) }) {
            guard let key = record.key.map({ String(decoding: $0, as: UTF8.self) }), let value = record.value,
                let object = try? JSONSerialization.jsonObject(with: Data(value)) as? [String: Any]
            else { continue }
            if last[key] == nil { order.append(key) }
            last[key] = object
        }
        // Every platform, unknown included, so that ios + android + unknown = impr + clicks + opens.
        let columns = [
            "delivery", "window (UTC)", "impr", "clicks", "opens", "u.impr", "u.clicks", "u.opens", "dismissed", "open rate", "ios", "android",
            "unknown", "rev",
        ]
        var rows: [[String]] = []
        for key in order.sorted() {
            guard let o = last[key] else { continue }
            func n(_ name: String) -> Int { o[name] as? Int ?? 0 }
            let platforms = o["platforms"] as? [String: Int] ?? [:]
            let start = (o["windowStart"] as? String ?? "")
            let end = (o["windowEnd"] as? String ?? "")
            let span = "\(start.dropFirst(5).prefix(11).replacingOccurrences(of: "T", with: " "))-\(end.dropFirst(11).prefix(5))"
            let rate = n("uniqueImpressions") > 0 ? String(format: "%.1f%%", 100 * Double(n("uniqueOpens")) / Double(n("uniqueImpressions"))) : "-"
            rows.append([
                o["deliveryId"] as? String ?? "", span, "\(n("impressions"))", "\(n("clicks"))", "\(n("opens"))",
                "\(n("uniqueImpressions"))", "\(n("uniqueClicks"))", "\(n("uniqueOpens"))", "\(n("dismissals"))", rate,
                "\(platforms["ios"] ?? 0)", "\(platforms["android"] ?? 0)", "\(platforms["unknown"] ?? 0)", "\(n("revision"))",
            ])
        }
        out.line("Aggregates: last record per delivery and window (\(records.count) records produced, \(rows.count) keys)")
        out.table(columns, rows)
        out.line("impr/clicks/opens count hits (SDK retries included); u.* count distinct recipients (broadlogId).")
        out.line("dismissed = clicked and not opened; open rate = u.opens / u.impr (iOS under-reports impressions);")
        out.line("ios/android/unknown: hits by platform (unknown: the hit named none), adding up to impr + clicks + opens;")
        let corrected = records.count - rows.count
        out.line(
            "rev: the record's revision, the number of hits counted in its window (impr + clicks + opens); a late hit re-emits its window with a higher one. "
                + (corrected == 0
                    ? "Here no key was emitted more than once."
                    : "Here \(corrected) of the records produced were earlier revisions, superseded by the rows above."))
        if rows.contains(where: { $0[2] == "0" }) {
            let end = RFC3339.format(epochMillis: stream.start + stream.span)
            out.line(
                "Rows with impr 0 hold only clicks and opens: the generated impressions end at \(end.dropFirst(11).prefix(5)), and a click comes up to a minute after its impression, counted in the window it happened in."
            )
        }
        out.line("")
    }

    private func printDeadLetters(_ records: [StoredRecord], aggregates: Int, summary: PipelineSummary, out: Console) {
        var byReason: [String: (count: Int, example: String)] = [:]
        for record in records {
            guard let letter = DeadLetter(headers: record.headers) else { continue }
            let entry = byReason[letter.reason.rawValue] ?? (0, letter.detail)
            byReason[letter.reason.rawValue] = (entry.count + 1, entry.example)
        }
        out.line("Dead letters: \(records.count) in tracking-hits-dlq (original bytes, reason in headers)")
        out.table(
            ["reason", "count", "example detail"],
            byReason.sorted { $0.key < $1.key }.map { [$0.key, "\($0.value.count)", Self.shortened($0.value.example, to: 90)] })
        out.line("")
        let a = summary.accounting
        out.line(
            "Accounting: consumed \(a.consumed) = accepted \(a.accepted) + filtered \(a.filteredTotal) (tracking off) + dead-lettered \(a.deadLetteredTotal)  [\(a.balanced ? "balanced" : "NOT BALANCED")]"
        )
        out.line(
            "Written, as the run's summary counts it: \(a.emitted) aggregate records to tracking-aggregates, \(a.deadLetteredTotal) dead letters to tracking-hits-dlq (the topics, read back above, hold \(aggregates) and \(records.count))"
        )
    }
}

extension DemoCommand {
    /// The commands to try next, each one that works as printed (a test runs them): the same
    /// pipeline with a broker that stays up, the real worker, and a look at its output.
    static let nextSteps = [
        ("trackpipe embedded-broker", "a Kafka to try things on, until Ctrl-C: prints its ADDRESS, creates run's default topics"),
        ("trackpipe generate --brokers ADDRESS --count 20000", "20,000 hits of every shape into tracking-hits"),
        ("trackpipe run --brokers ADDRESS --until-end", "the worker, with run's defaults (1m windows), to the end of the topic"),
        ("kcat -b ADDRESS -C -t tracking-aggregates -e -f '%k %s\\n'", "the aggregates: key and JSON value of each record"),
        ("kcat -b ADDRESS -C -t tracking-hits-dlq -e -f '%h %s\\n'", "the dead letters: reason and source in the headers, then the original"),
    ]

    func printNextSteps(out: Console) {
        out.line("")
        out.line("Next, in another terminal for the broker:")
        let width = Self.nextSteps.map(\.0.count).max() ?? 0
        for (command, what) in Self.nextSteps {
            out.line("  \(command.padding(toLength: width, withPad: " ", startingAt: 0))  # \(what)")
        }
        out.line("Against your own Kafka: trackpipe run --brokers HOST:9092 (every flag: trackpipe run --help).")
    }

    /// At most `limit` characters; a cut text ends with "…" so that it does not read as complete.
    static func shortened(_ text: String, to limit: Int) -> String {
        text.count <= limit ? text : String(text.prefix(limit - 1)) + "…"
    }
}

/// Plain-text output for people: lines and aligned tables.
struct Console {
    func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    func table(_ header: [String], _ rows: [[String]]) {
        let widths = header.indices.map { column in
            ([header[column]] + rows.map { column < $0.count ? $0[column] : "" }).map(\.count).max() ?? 0
        }
        func render(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                // Numbers right-aligned, text left-aligned.
                let padding = String(repeating: " ", count: max(0, widths[index] - cell.count))
                return cell.first.map { $0.isNumber || $0 == "-" } == true && index > 1 ? padding + cell : cell + padding
            }.joined(separator: "  ")
        }
        func trimmed(_ text: String) -> String { String(text.reversed().drop(while: { $0 == " " }).reversed()) }
        line(trimmed("  " + render(header)))
        line("  " + widths.map { String(repeating: "-", count: $0) }.joined(separator: "  "))
        for row in rows { line(trimmed("  " + render(row))) }
    }
}
