#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Benchmarking
import Foundation
import HitGenerator
import Kafka
import Pipeline
import Runner
import Testing
import TrackpipeTestSupport

/// The shipped alert rules on a real Prometheus (Debian's), scraping a real worker on the
/// embedded broker: an alert fires for a real cause and is read back from Prometheus' HTTP API.
///
/// The rules are loaded from a copy of deploy/prometheus/alerts.yml in which only the `for:`
/// durations are set to 0s, so the test does not wait the minutes production should; every
/// expression is the shipped one. Scrapes and evaluations run every second.
@Suite("alerts on a real Prometheus", .serialized)
struct PrometheusAlertTests {
    static let minute: Int64 = 60_000

    @Test("hits stamped hours in the past: TrackpipeTooLateHits fires on Prometheus, and every series the rules and the dashboard use is on /metrics")
    func tooLateHitsFireTheAlert() throws {
        // Setup installs Debian's prometheus package: a missing server is a failure, not a skip.
        let server = try #require(Executables.find("prometheus"), "prometheus not found on the PATH: run ./scripts/setup.sh (Debian's prometheus package)")
        let broker = try EmbeddedBroker()
        try broker.createTopic("hits", partitions: 4)
        try broker.createTopic("aggregates", partitions: 2)
        try broker.createTopic("dlq", partitions: 1)
        let now = wallClockMillis()

        // Current hits first: every input partition's event time reaches the present.
        let current = Corpus(HitStream(HitStreamConfig(count: 2_000, seed: 41, deliveries: 4, start: now - 10 * Self.minute, span: 9 * Self.minute)).generate())
        try current.produce(0..<current.hits.count, to: "hits", on: broker)
        let metricsPort = try LoopbackPort.free()
        let worker = try BackgroundTrackpipe(
            TrackpipeBinary.locate(),
            [
                "run", "--brokers", broker.bootstrapServers, "--input-topic", "hits", "--output-topic", "aggregates", "--dlq-topic", "dlq",
                "--group", "alerting", "--shards", "2", "--commit-interval", "500ms", "--metrics-port", "\(metricsPort)",
                "--log-level", "warning", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
            ])
        defer { worker.signal(SIGKILL) }
        func workerMetric(_ series: String) -> Double? {
            guard let text = try? HTTPGet.fetch(port: metricsPort, path: "/metrics").body else { return nil }
            return text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
        }
        let counted = BackgroundTrackpipe.waitUntil(seconds: 120) {
            (workerMetric(#"trackpipe_messages_consumed_total{stage="normalize"}"#) ?? 0) >= 2_000
                && (workerMetric(#"trackpipe_hits_accepted_total{stage="aggregate"}"#) ?? 0) > 0
        }
        try #require(counted, "the worker never counted the current hits; stderr: \(worker.stderr.suffix(2_000))")

        // Prometheus on loopback, with the shipped rules (for: 0s) and a one-second rhythm.
        let prometheus = try PrometheusServer(executable: server, scraping: metricsPort)
        defer { prometheus.stop() }
        let scraped = BackgroundTrackpipe.waitUntil(seconds: 120) {
            let result = try? prometheus.query(#"trackpipe_dead_letters_total{job="trackpipe", stage="aggregate", reason="too_late"}"#)
            return result?.first?.value == 0 && (try? prometheus.query(#"up{job="trackpipe"}"#).first?.value) == 1
        }
        try #require(scraped, "Prometheus never scraped the worker; its log: \(prometheus.log.suffix(2_000))")

        // The real cause: hits three hours old, long past their windows' retention (1 h).
        let stale = Corpus(
            HitStream(HitStreamConfig(count: 600, seed: 42, deliveries: 4, start: now - 180 * Self.minute, span: 5 * Self.minute, badRate: 0)).generate())
        try stale.produce(0..<stale.hits.count, to: "hits", on: broker)
        let started = Date()
        var alert: [String: Any]?
        let fired = BackgroundTrackpipe.waitUntil(seconds: 300) {
            alert = (try? prometheus.alerts())?.first { ($0["labels"] as? [String: String])?["alertname"] == "TrackpipeTooLateHits" && $0["state"] as? String == "firing" }
            return alert != nil
        }
        try #require(fired, "TrackpipeTooLateHits never fired; alerts: \(String(describing: try? prometheus.alerts())); worker: \(worker.stderr.suffix(1_000))")
        let labels = alert?["labels"] as? [String: String] ?? [:]
        let annotations = alert?["annotations"] as? [String: String] ?? [:]
        #expect(labels["job"] == "trackpipe" && labels["severity"] == "warning", "\(labels)")
        #expect(annotations["runbook"] == "docs/operations.md#trackpipetoolatehits")
        #expect(annotations["summary"]?.hasSuffix("of hits are too late for their windows") == true, "\(annotations)")
        print("TrackpipeTooLateHits fired \(Int(Date().timeIntervalSince(started))) s after the stale hits were produced: \(annotations["summary"] ?? "")")
        // The worker counted them as too_late: the alert has its real cause.
        #expect((workerMetric(#"trackpipe_dead_letters_total{stage="aggregate",reason="too_late"}"#) ?? 0) >= 100)
        // Nothing else is wrong with this worker, and the rules say so.
        func firingNow() -> Set<String> {
            Set(((try? prometheus.alerts()) ?? []).filter { $0["state"] as? String == "firing" }.compactMap { ($0["labels"] as? [String: String])?["alertname"] })
        }
        let firing = firingNow()
        for quiet in ["TrackpipeDown", "TrackpipeUnhealthy", "TrackpipeBrokerUnreachable", "TrackpipeFatalError"] {
            #expect(!firing.contains(quiet), "\(quiet) fired on a healthy worker: \(firing)")
        }
        // TrackpipeNoProgress is about input left unread: with the test's `for: 0s`, a scrape
        // between the stale hits' arrival and their first read rightly sees input waiting and
        // nothing read yet (seen on CI). Once Prometheus sees the worker caught up, it must not
        // fire: a rule that kept firing then would page on every healthy worker.
        let caughtUp = BackgroundTrackpipe.waitUntil(seconds: 300) {
            let lags = (try? prometheus.query(#"trackpipe_consumer_lag{job="trackpipe"}"#)) ?? []
            return !lags.isEmpty && lags.allSatisfy { $0.value == 0 }
        }
        try #require(caughtUp, "Prometheus never saw the worker caught up: \(String(describing: try? prometheus.query(#"trackpipe_consumer_lag"#)))")
        let quiet = BackgroundTrackpipe.waitUntil(seconds: 60) { !firingNow().contains("TrackpipeNoProgress") }
        #expect(quiet, "TrackpipeNoProgress fires on a worker that has caught up: \(firingNow())")

        // Every series a rule or a panel uses exists on the live worker's /metrics...
        let exposition = try HTTPGet.fetch(port: metricsPort, path: "/metrics").body
        let exported = MonitoringFiles.metricNames(inExposition: exposition)
        for name in try MonitoringFiles.metricNamesUsed().sorted() {
            #expect(exported.contains(name), "\(name) is used by the rules or the dashboard but the worker's /metrics has no such series")
        }
        // ...and every panel's query runs on this Prometheus and finds data.
        for query in try MonitoringFiles.queries(MonitoringFiles.dashboard()) {
            let runnable = query.replacingOccurrences(of: "$__rate_interval", with: "1m").replacingOccurrences(of: "$instance", with: ".*")
            #expect(throws: Never.self, "\(query)") { _ = try prometheus.query(runnable) }
        }
    }
}

/// Debian's Prometheus on a free loopback port, with a data directory of its own, scraping one
/// worker every second and evaluating the shipped rules with `for:` set to 0s. Killed by
/// `stop()` (and by `deinit`, should a test fail before it).
final class PrometheusServer {
    let port: Int
    let directory: URL
    private var running: Process?

    init(executable: URL, scraping metricsPort: Int) throws {
        let fm = FileManager.default
        directory = fm.temporaryDirectory.appendingPathComponent("trackpipe-prometheus-\(UUID().uuidString)")
        try fm.createDirectory(at: directory.appendingPathComponent("data"), withIntermediateDirectories: true)
        let rules = try DeployFiles.text("deploy/prometheus/alerts.yml")
        let quick = try NSRegularExpression(pattern: #"(?m)^(\s+)for: \S+$"#)
            .stringByReplacingMatches(in: rules, range: NSRange(rules.startIndex..., in: rules), withTemplate: "$1for: 0s")
        try quick.write(to: directory.appendingPathComponent("alerts.yml"), atomically: true, encoding: .utf8)
        try """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            rule_files:
              - alerts.yml
            scrape_configs:
              - job_name: trackpipe
                static_configs:
                  - targets: ["127.0.0.1:\(metricsPort)"]
            """.write(to: directory.appendingPathComponent("prometheus.yml"), atomically: true, encoding: .utf8)
        let log = directory.appendingPathComponent("log")
        _ = fm.createFile(atPath: log.path, contents: nil)
        // The port is free when chosen; should another process take it first, Prometheus exits
        // and the next attempt picks another.
        var lastLog = ""
        for _ in 0..<3 {
            let candidate = try LoopbackPort.free()
            let attempt = Process()
            attempt.executableURL = executable
            attempt.arguments = [
                "--config.file=\(directory.appendingPathComponent("prometheus.yml").path)",
                "--storage.tsdb.path=\(directory.appendingPathComponent("data").path)",
                "--web.listen-address=127.0.0.1:\(candidate)", "--log.level=warn",
            ]
            attempt.standardInput = FileHandle.nullDevice
            let handle = try FileHandle(forWritingTo: log)
            attempt.standardOutput = handle
            attempt.standardError = handle
            try attempt.run()
            let ready = BackgroundTrackpipe.waitUntil(seconds: 60) {
                !attempt.isRunning || (try? HTTPGet.fetch(port: candidate, path: "/-/ready").status) == 200
            }
            if ready && attempt.isRunning {
                self.port = candidate
                self.running = attempt
                return
            }
            if attempt.isRunning { kill(attempt.processIdentifier, SIGKILL) }
            attempt.waitUntilExit()
            lastLog = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        }
        try? fm.removeItem(at: directory)
        throw DeployFileError("prometheus did not start: \(lastLog.suffix(2_000))")
    }

    var log: String { (try? String(contentsOf: directory.appendingPathComponent("log"), encoding: .utf8)) ?? "" }

    /// An instant query's samples, each with its labels and value; throws on a query error.
    func query(_ promql: String) throws -> [(labels: [String: String], value: Double)] {
        let data = try api("/api/v1/query?query=" + Self.encode(promql))
        guard let result = data["result"] as? [[String: Any]] else { throw DeployFileError("no result for \(promql): \(data)") }
        return result.map { sample in
            let value = (sample["value"] as? [Any])?.last as? String
            return (sample["metric"] as? [String: String] ?? [:], value.flatMap(Double.init) ?? .nan)
        }
    }

    /// Active alerts, pending and firing, as Prometheus lists them.
    func alerts() throws -> [[String: Any]] {
        try api("/api/v1/alerts")["alerts"] as? [[String: Any]] ?? []
    }

    private func api(_ path: String) throws -> [String: Any] {
        let response = try HTTPGet.fetch(port: port, path: path)
        guard let object = try JSONSerialization.jsonObject(with: Data(response.body.utf8)) as? [String: Any],
            object["status"] as? String == "success", let data = object["data"] as? [String: Any]
        else { throw DeployFileError("Prometheus \(path): \(response.status) \(response.body.prefix(500))") }
        return data
    }

    private static func encode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    func stop() {
        guard let running else { return }
        self.running = nil
        if running.isRunning {
            kill(running.processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(20)
            while running.isRunning && Date() < deadline { usleep(50_000) }
            if running.isRunning { kill(running.processIdentifier, SIGKILL) }
        }
        running.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }
}
