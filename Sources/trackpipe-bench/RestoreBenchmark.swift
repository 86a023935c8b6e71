import ArgumentParser
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

/// A `trackpipe run` with a metrics port, read while it runs.
final class MetricsProcess {
    let process = Process()
    let port: Int

    init(binary: String, arguments: [String]) throws {
        port = Int.random(in: 20_000..<60_000)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments + ["--metrics-port", "\(port)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    struct Metrics {
        var text: String

        /// The first series of `name` with `stage="…"` among its labels; 0 when absent.
        func value(_ name: String, stage: String) -> Double {
            for line in text.split(separator: "\n") where line.hasPrefix(name + "{") && line.contains("stage=\"\(stage)\"") {
                return Double(line.split(separator: " ").last ?? "") ?? 0
            }
            return 0
        }

        func has(_ name: String, stage: String) -> Bool {
            text.split(separator: "\n").contains { $0.hasPrefix(name + "{") && $0.contains("stage=\"\(stage)\"") }
        }
    }

    /// GET /metrics over a plain socket (Foundation on Linux reads no http URL by itself).
    func metrics() throws -> Metrics {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw BenchError("the metrics port does not answer yet") }
        let request = Array("GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n".utf8)
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            response += chunk[0..<count]
        }
        return Metrics(text: String(decoding: response, as: UTF8.self))
    }

    func waitUntil(timeoutSeconds: Double, _ condition: (Metrics) -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeoutSeconds)
        while Date() < deadline {
            guard process.isRunning else { throw BenchError("trackpipe exited (status \(process.terminationStatus))") }
            if let metrics = try? metrics(), condition(metrics) { return }
            usleep(200_000)
        }
        throw BenchError("the worker did not get there within \(Int(timeoutSeconds)) s")
    }

    func kill() {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
