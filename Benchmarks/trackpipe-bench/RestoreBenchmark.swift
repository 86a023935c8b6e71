import ArgumentParser
import Benchmarking
import Foundation
import HitGenerator

/// How long a worker takes to be back after a SIGKILL, and what it re-reads to get there: a live
/// worker counts every hit of a topic, commits, is killed, and is started again; the restart is
/// measured until both stages have caught up (nothing restoring, no lag on either topic).
///
/// `--baseline` names another trackpipe binary (an older build) measured the same way in the
/// same run, alternating: the ratio of the two is the figure, not the seconds.
struct RestoreBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Restart after a SIGKILL: events re-read, state records read, seconds to caught up (vs --baseline).")

    @Option(help: "Minutes of event time the topic covers (all within the retention).") var minutes = 20
    @Option(help: "Hits per minute of event time.") var perMinute = 5_000
    @Option(help: "Partitions of the input, repartition and state topics.") var partitions = 8
    @Option(help: "Rounds (each measures every binary once, alternating).") var rounds = 3
    @OptionGroup var builds: TrackpipeBuilds

    func run() throws {
        let (binary, baseline) = try builds.resolved()
        var contenders = [("this build", binary)]
        if let baseline { contenders.append(("baseline", baseline)) }
        let count = minutes * perMinute
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let hits = HitStream(
            HitStreamConfig(count: count, seed: 7, deliveries: 40, start: now - Int64(minutes) * 60_000, span: Int64(minutes) * 60_000)
        ).generate()
        print("restore benchmark: \(count) hits over \(minutes) minutes of event time, \(partitions) partitions, \(rounds) rounds")
        var results: [String: [Measurement]] = [:]
        for round in 1...rounds {
            for (name, path) in contenders {
                let measured = try measure(binary: path, broker: binary, hits: hits, group: "restore-\(round)-\(name.prefix(4))")
                results[name, default: []].append(measured)
                print(
                    "  round \(round) \(name): re-read \(measured.reread) events, \(measured.stateRecords) state records, caught up in \(String(format: "%.1f", measured.seconds)) s after the restart using \(String(format: "%.2f", measured.cpu)) s of CPU (\(measured.counted) events counted before the kill)"
                )
            }
        }
        for (name, _) in contenders {
            let rows = results[name] ?? []
            print(
                "\(name): median re-read \(Int(BenchSupport.median(rows.map { Double($0.reread) }))) events (\(String(format: "%.1f", 100 * BenchSupport.median(rows.map { Double($0.reread) / Double(max(1, $0.counted)) })))% of those counted), \(Int(BenchSupport.median(rows.map { Double($0.stateRecords) }))) state records, \(String(format: "%.1f", BenchSupport.median(rows.map(\.seconds)))) s to caught up, \(String(format: "%.2f", BenchSupport.median(rows.map(\.cpu)))) s of CPU"
            )
        }
    }

    struct Measurement {
        var counted: Int
        var reread: Int
        var stateRecords: Int
        /// Wall time from the restart to caught up: mostly the group's rejoin on the embedded
        /// broker (it holds a restarted member for the session timeout).
        var seconds: Double
        /// CPU time the restarted worker used until then: the work of getting back.
        var cpu: Double
    }

    /// One kill and restart on a fresh embedded broker.
    func measure(binary: String, broker brokerBinary: String, hits: [GeneratedHit], group: String) throws -> Measurement {
        let broker = try BrokerProcess(
            binary: brokerBinary,
            topics: ["tracking-hits", "tracking-aggregates", "tracking-hits-dlq", "\(group)-repartition", "\(group)-state"],
            partitions: partitions)
        defer { broker.stop() }
        try BenchSupport.preload(
            bootstrapServers: broker.bootstrapServers, topic: "tracking-hits", partitions: partitions, values: hits.map(\.value),
            timestamps: hits.map(\.kafkaTimestamp))
        let arguments = [
            "run", "--brokers", broker.bootstrapServers, "--group", group, "--log-level", "warning", "--commit-interval", "1s",
            "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
        ]
        // Counts everything, commits, then is killed.
        let first = try MetricsProcess(binary: binary, arguments: arguments)
        try first.waitUntil(timeoutSeconds: 600) { metrics in
            metrics.value("trackpipe_messages_consumed_total", stage: "normalize") >= Double(hits.count)
                && metrics.value("trackpipe_consumer_lag", stage: "aggregate") == 0
                && metrics.value("trackpipe_messages_consumed_total", stage: "aggregate") > 0
        }
        // Two commit intervals, so that what was counted is committed, then no warning.
        usleep(2_500_000)
        let counted = Int(try first.metrics().value("trackpipe_messages_consumed_total", stage: "aggregate"))
        first.kill()

        let started = Date()
        let second = try MetricsProcess(binary: binary, arguments: arguments)
        defer { second.kill() }
        // Caught up: both stages assigned (lag reported), nothing restoring, no lag.
        try second.waitUntil(timeoutSeconds: 900) { metrics in
            metrics.has("trackpipe_consumer_lag_partition", stage: "aggregate")
                && metrics.has("trackpipe_consumer_lag_partition", stage: "normalize")
                && metrics.value("trackpipe_tasks_restoring", stage: "aggregate") == 0
                && metrics.value("trackpipe_consumer_lag", stage: "aggregate") == 0
                && metrics.value("trackpipe_consumer_lag", stage: "normalize") == 0
        }
        let seconds = Date().timeIntervalSince(started)
        let cpu = ProcessCPU.seconds(pid: second.process.processIdentifier)
        let metrics = try second.metrics()
        return Measurement(
            counted: counted, reread: Int(metrics.value("trackpipe_messages_consumed_total", stage: "aggregate")),
            stateRecords: Int(metrics.value("trackpipe_restore_records_total", stage: "aggregate")), seconds: seconds, cpu: cpu)
    }
}
