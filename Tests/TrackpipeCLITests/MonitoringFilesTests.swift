#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Foundation
import Testing
@testable import Windowing
import Yams

@testable import Pipeline
@testable import Runner

/// The alert rules and the dashboard are queries no compiler reads. These tests hold them to
/// the program: promtool checks and unit-tests the rules, every alert links a runbook section
/// that exists, every metric a rule or a panel asks for is one the worker exports, and the
/// dashboard is wired to the data source the compose stack provisions. (The rules firing on a
/// real Prometheus: `PrometheusAlertTests`.)
@Suite("alert rules and dashboard")
struct MonitoringFilesTests {
    @Test("promtool: the rules and the Prometheus config are valid, and the rules' unit tests pass")
    func promtoolChecksAndTestsTheRules() throws {
        // Setup installs Debian's prometheus package: a missing promtool is a failure, not a skip.
        let promtool = try #require(Executables.find("promtool"), "promtool not found on the PATH: run ./scripts/setup.sh (Debian's prometheus package)")
        for arguments in [
            ["check", "rules", "deploy/prometheus/alerts.yml"], ["check", "config", "deploy/prometheus/prometheus.yml"],
            ["test", "rules", "deploy/prometheus/alerts.test.yml"],
        ] {
            let result = try Executables.run(promtool, arguments, in: DeployFiles.root)
            #expect(result.status == 0, "promtool \(arguments.joined(separator: " ")):\n\(result.output)")
            #expect(result.output.contains("SUCCESS"), "promtool \(arguments.joined(separator: " ")):\n\(result.output)")
        }
    }

    @Test("every alert has a unit test where it fires, a severity, a summary, and a runbook section in docs/operations.md")
    func everyAlertIsTestedAndDocumented() throws {
        let rules = try MonitoringFiles.alertRules()
        #expect(rules.count >= 12, "the rules cover lag, event time, dead letters, progress, pauses, gaps, brokers, health, fatal errors")
        let tests = try DeployFiles.yaml("deploy/prometheus/alerts.test.yml")
        var fired: Set<String> = []
        for test in (tests["tests"].sequence ?? []).map(YAMLNode.init) {
            for check in (test["alert_rule_test"].sequence ?? []).map(YAMLNode.init) where !(check["exp_alerts"].sequence ?? []).isEmpty {
                if let name = check["alertname"].string { fired.insert(name) }
            }
        }
        let runbook = try DeployFiles.text("docs/operations.md")
        let anchors = DocumentationTests.anchors(runbook)
        for rule in rules {
            let name = try #require(rule["alert"].string)
            #expect(fired.contains(name), "alerts.test.yml has no case where \(name) fires")
            #expect(["warning", "critical"].contains(rule["labels"]["severity"].string ?? ""), "\(name): severity warning or critical")
            #expect(rule["annotations"]["summary"].string?.isEmpty == false, "\(name): a summary")
            #expect(rule["annotations"]["description"].string?.isEmpty == false, "\(name): a description")
            let link = rule["annotations"]["runbook"].string ?? ""
            #expect(link == "docs/operations.md#\(name.lowercased())", "\(name): runbook annotation \(link)")
            #expect(anchors.contains(name.lowercased()), "docs/operations.md has no section \(name)")
        }
    }

    @Test("the shipped rules wait long enough to be worth waking someone for")
    func alertsWaitSensibleDurations() throws {
        // A state (a gauge compared with a threshold) must hold for minutes; an event (a
        // counter's increase, a restart) is judged over a window of minutes instead.
        for rule in try MonitoringFiles.alertRules() {
            let name = rule["alert"].string ?? "?"
            let expr = rule["expr"].string ?? ""
            let hold = try rule["for"].string.map(MonitoringFiles.seconds) ?? 0
            let windows = try MonitoringFiles.rangeSelectors(in: expr).map(MonitoringFiles.seconds)
            #expect(hold >= 120 || (windows.max() ?? 0) >= 600, "\(name): for: \(hold) s over windows \(windows)")
            #expect(hold <= 1_800, "\(name): for: \(hold) s is too long to be useful")
        }
    }

    @Test("every metric the rules and the dashboard use is exported by the worker once both stages have reported")
    func rulesAndDashboardUseExportedMetrics() throws {
        let exported = MonitoringFiles.metricNames(inExposition: Self.exposition())
        let used = try MonitoringFiles.metricNamesUsed()
        #expect(used.count >= 20)
        for name in used.sorted() {
            #expect(exported.contains(name), "\(name) is used by the rules or the dashboard but /metrics has no such series")
        }
        // The extraction is what the check rests on: it finds names in real queries.
        #expect(
            MonitoringFiles.metricNames(inQuery: #"sum by (le) (rate(trackpipe_emit_delay_seconds_bucket{instance=~"$instance"}[5m])) / up"#)
                == ["trackpipe_emit_delay_seconds_bucket"])
    }

    @Test("a renamed metric goes on under its former name, with the same value, for one release: documented with its removal, used by no rule or panel")
    func renamedMetricsKeepTheirFormerNamesForOneRelease() throws {
        let metrics = PipelineMetrics()
        var report = StageReport()
        (report.accounting.reread, report.accounting.rereadFinal) = (7, 3)
        metrics.stage("aggregate").record(report)
        let text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
        let used = try MonitoringFiles.metricNamesUsed()
        let operations = try DeployFiles.text("docs/operations.md")
        #expect(PipelineMetrics.formerNames.count == 2)
        for (name, former) in PipelineMetrics.formerNames {
            let value = name == "trackpipe_messages_reread" ? 7 : 3
            #expect(text.contains("\(name)_total{stage=\"aggregate\"} \(value)\n") && text.contains("\(former)_total{stage=\"aggregate\"} \(value)\n"), "\(text)")
            #expect(!used.contains("\(former)_total"), "the rules and the dashboard use \(name)_total, not its former name")
            #expect(operations.contains("`\(former)_total`") && operations.contains("`\(name)_total`"), "docs/operations.md lists both names")
        }
    }

    @Test("the dashboard: every panel has a title, a description, queries on the provisioned data source, a place on the grid, and a description in docs/operations.md")
    func dashboardIsWellFormedAndDocumented() throws {
        let dashboard = try MonitoringFiles.dashboard()
        let datasource = try DeployFiles.yaml("deploy/grafana/provisioning/datasources/prometheus.yml")
        let sources = (datasource["datasources"].sequence ?? []).map(YAMLNode.init)
        let uid = try #require(sources.first?["uid"].string)
        #expect(sources.first?["type"].string == "prometheus")
        let operations = try DeployFiles.text("docs/operations.md")
        let panels = MonitoringFiles.panels(dashboard)
        #expect(panels.count >= 12)
        var ids: Set<Int> = []
        var occupied: [String: String] = [:]
        for panel in panels {
            let title = panel["title"] as? String ?? ""
            #expect(!title.isEmpty)
            if let id = panel["id"] as? Int { #expect(ids.insert(id).inserted, "panel id \(id) twice") }
            let grid = panel["gridPos"] as? [String: Int] ?? [:]
            let (x, y, w, h) = (grid["x"] ?? -1, grid["y"] ?? -1, grid["w"] ?? 0, grid["h"] ?? 0)
            #expect(x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= 24, "\(title): gridPos \(grid)")
            for column in x..<max(x, x + w) {
                for row in y..<max(y, y + h) {
                    if let other = occupied["\(column),\(row)"] { Issue.record("\(title) overlaps \(other)") }
                    occupied["\(column),\(row)"] = title
                }
            }
            guard panel["type"] as? String != "row" else { continue }
            #expect((panel["description"] as? String)?.isEmpty == false, "\(title): a description")
            #expect((panel["datasource"] as? [String: Any])?["uid"] as? String == uid, "\(title): the provisioned data source")
            let targets = panel["targets"] as? [[String: Any]] ?? []
            #expect(!targets.isEmpty && targets.allSatisfy { ($0["expr"] as? String)?.isEmpty == false }, "\(title): queries")
            #expect(operations.contains("**\(title)**"), "docs/operations.md does not describe the panel \(title)")
        }
        // The panels the operators asked for.
        let queries = MonitoringFiles.queries(dashboard).joined(separator: "\n")
        for needed in [
            "trackpipe_consumer_lag", "trackpipe_messages_consumed_total", "trackpipe_event_time_lag_seconds", "trackpipe_dead_letters_total",
            "trackpipe_emit_delay_seconds_bucket", "trackpipe_duplicates_dropped_total", "trackpipe_messages_reread_total",
            "trackpipe_input_paused", "trackpipe_broker_reachable", "process_resident_memory_bytes",
        ] {
            #expect(queries.contains(needed), "no panel shows \(needed)")
        }
    }

    /// What `/metrics` shows once both stages have reported a watermark, lag and a batch: the
    /// same calls `StageRunner.report()` makes.
    static func exposition() -> String {
        let metrics = PipelineMetrics()
        for name in ["normalize", "aggregate"] {
            let stage = metrics.stage(name)
            // What each runner registers as it starts, for the topic it reads.
            stage.lost(0, topic: name == "normalize" ? "tracking-hits" : "trackpipe-repartition")
            var report = StageReport()
            report.accounting.consumed = 10
            report.emitDelays = [12]
            stage.record(report)
            // The aggregate stage's windows, of two sizes.
            var gauges = name == "aggregate" ? StageGauges(counting: WindowConfig(sizes: [WindowSize(size: 60_000), WindowSize(size: 3_600_000)])) : StageGauges()
            gauges.watermark = 1_000_000
            stage.gauges(gauges, now: 1_060_000)
            stage.lag([0: 3], owned: 1)
        }
        return String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
    }

    @Test("an instance that owns no partitions reports no lag, not 0; a partition given away loses its series")
    func lagOfWhatTheInstanceOwns() {
        let metrics = PipelineMetrics()
        let stage = metrics.stage("normalize")
        func text() -> String { String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self) }
        stage.lag([0: 3, 1: 4], owned: 2)
        #expect(text().contains("trackpipe_consumer_lag{stage=\"normalize\"} 7.0\n"), "\(text())")
        #expect(text().contains("trackpipe_partitions_owned{stage=\"normalize\"} 2.0\n"))
        stage.lag([1: 4], released: [0], owned: 1)
        #expect(!text().contains("trackpipe_consumer_lag_partition{partition=\"0\""), "\(text())")
        #expect(text().contains("trackpipe_consumer_lag_partition{partition=\"1\",stage=\"normalize\"} 4.0") || text().contains("trackpipe_consumer_lag_partition{stage=\"normalize\",partition=\"1\"} 4.0"), "\(text())")
        // Every partition given away in a rebalance: the group's backlog is its new owners' to report.
        stage.lag([:], released: [1], owned: 0)
        #expect(!text().contains("trackpipe_consumer_lag{stage=\"normalize\"}"), "\(text())")
        #expect(!text().contains("trackpipe_consumer_lag_partition{"), "\(text())")
        #expect(text().contains("trackpipe_partitions_owned{stage=\"normalize\"} 0.0\n"))
        stage.lag([2: 0], owned: 1)
        #expect(text().contains("trackpipe_consumer_lag{stage=\"normalize\"} 0.0\n"), "an owner that is caught up says 0")
    }

    @Test("the event-time lag is the wall clock minus the stage's watermark, and goes away with the watermark")
    func eventTimeLagFollowsTheWatermark() {
        let metrics = PipelineMetrics()
        let stage = metrics.stage("aggregate")
        var gauges = StageGauges()
        gauges.watermark = 1_000_000
        stage.gauges(gauges, now: 1_090_500)
        var text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
        #expect(text.contains("trackpipe_event_time_lag_seconds{stage=\"aggregate\"} 90.5\n"), "\(text)")
        // The stage gave its partitions away: no lag frozen at the last value.
        stage.gauges(StageGauges(), now: 1_200_000)
        text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
        #expect(!text.contains("trackpipe_event_time_lag_seconds{"), "\(text)")
        stage.gauges(gauges, now: 1_001_000)
        text = String(decoding: metrics.exposition(healthProblem: "stuck"), as: UTF8.self)
        #expect(text.contains("trackpipe_event_time_lag_seconds{stage=\"aggregate\"} 1.0\n"), "\(text)")
        #expect(text.contains("trackpipe_healthy 0.0\n"), "a scrape while /health fails")
        #expect(text.contains("trackpipe_run_failed 0.0\n"))
    }

    @Test("pending windows: their count at all times, and the event time the first still waits for while there is one and a watermark, per window size")
    func pendingWindowsAndTheFirstDue() {
        let metrics = PipelineMetrics()
        let stage = metrics.stage("aggregate")
        var gauges = StageGauges(counting: WindowConfig(size: 60_000))
        stage.gauges(gauges, now: 0)
        var text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
        #expect(text.contains("trackpipe_windows_pending{stage=\"aggregate\",window=\"1m\"} 0.0\n"), "\(text)")
        #expect(!text.contains("trackpipe_first_window_due_seconds{"), "nothing pending, nothing due")
        gauges.windows[60_000]?.openWindows = 482
        gauges.windows[60_000]?.firstOpenDue = 4_600_000
        gauges.watermark = 1_000_000
        stage.gauges(gauges, now: 2_000_000)
        text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
        #expect(text.contains("trackpipe_windows_pending{stage=\"aggregate\",window=\"1m\"} 482.0\n"), "\(text)")
        #expect(text.contains("trackpipe_first_window_due_seconds{stage=\"aggregate\",window=\"1m\"} 3600.0\n"), "event time, not the wall clock: \(text)")
        gauges.watermark = nil
        stage.gauges(gauges, now: 2_000_000)
        text = String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self)
        #expect(!text.contains("trackpipe_first_window_due_seconds{"), "no watermark, no distance: \(text)")
    }

    @Test("--emit final of several sizes: the pending windows' line says how many of each size, and of which size the first due is")
    func pendingTextBySize() {
        var gauges = StageGauges(counting: WindowConfig(sizes: [WindowSize(size: 60_000), WindowSize(size: 3_600_000)]).emitting(.final))
        gauges.windows[60_000]?.openWindows = 2
        gauges.windows[60_000]?.firstOpenDue = 7_200_000
        gauges.windows[3_600_000]?.openWindows = 480
        gauges.windows[3_600_000]?.firstOpenDue = 10_800_000
        gauges.watermark = 3_600_000
        #expect(
            gauges.pendingText()
                == "482 windows pending (1m 2, 1h 480; --emit final: written once event time passes their end plus the retention); the first (1m) is due when event time reaches 1970-01-01T02:00:00Z, now at 1970-01-01T01:00:00Z")

        // --emit changes,final: the minutes wait only for their grace; the hours are pending.
        var mixed = StageGauges(counting: WindowConfig(sizes: [WindowSize(size: 60_000), WindowSize(size: 3_600_000, emission: .final)]))
        mixed.windows = gauges.windows
        mixed.watermark = gauges.watermark
        #expect(
            mixed.pendingText()
                == "480 windows pending (--emit final: written once event time passes their end plus the retention); the first is due when event time reaches 1970-01-01T03:00:00Z, now at 1970-01-01T01:00:00Z")
        mixed.windows[3_600_000]?.openWindows = 0
        #expect(mixed.pendingText() == nil, "open minutes of --emit changes are not pending")
    }

    @Test("several sizes: each window series once per size under the same name, labelled window; the cap's early finalizations and the hits too late for a size by the size, at 0 from the start; a stage without windows has none")
    func windowSeriesBySize() {
        let metrics = PipelineMetrics()
        let stage = metrics.stage("aggregate")
        metrics.stage("normalize").gauges(StageGauges(), now: 0)
        var gauges = StageGauges(counting: WindowConfig(sizes: [WindowSize(size: 60_000), WindowSize(size: 3_600_000)]))
        stage.gauges(gauges, now: 0)
        func text() -> String { String(decoding: metrics.exposition(healthProblem: nil), as: UTF8.self) }
        for name in ["trackpipe_windows_open", "trackpipe_window_entries", "trackpipe_windows_pending"] {
            for window in ["1m", "1h"] { #expect(text().contains("\(name){stage=\"aggregate\",window=\"\(window)\"} 0.0\n"), "\(text())") }
            #expect(!text().contains("\(name){stage=\"aggregate\"}") && !text().contains("\(name){stage=\"normalize\""), "\(text())")
        }
        for name in ["trackpipe_windows_finalized_early_total", "trackpipe_hits_too_late_for_size_total"] {
            for window in ["1m", "1h"] { #expect(text().contains("\(name){stage=\"aggregate\",window=\"\(window)\"} 0\n"), "\(text())") }
        }
        gauges.windows[60_000]?.openWindows = 5
        gauges.windows[60_000]?.retainedWindows = 2
        gauges.windows[3_600_000]?.entries = 40
        stage.gauges(gauges, now: 0)
        var report = StageReport()
        report.accounting.tooLateForSize = [60_000: 12]
        var eviction = CapacityEviction(
            entriesBefore: 100, maxEntries: 100, entriesFreed: 20, windowsEvicted: 4, windowsEmittedEarly: 0, oldestWindowStart: 0,
            newestWindowStart: 0, newHorizon: 0)
        eviction.windowsEvictedBySize = [60_000: 3, 3_600_000: 1]
        report.capacityEvictions = [eviction]
        stage.record(report)
        #expect(text().contains("trackpipe_windows_open{stage=\"aggregate\",window=\"1m\"} 7.0\n"), "\(text())")
        #expect(text().contains("trackpipe_windows_pending{stage=\"aggregate\",window=\"1m\"} 5.0\n"), "\(text())")
        #expect(text().contains("trackpipe_window_entries{stage=\"aggregate\",window=\"1h\"} 40.0\n"), "\(text())")
        #expect(text().contains("trackpipe_hits_too_late_for_size_total{stage=\"aggregate\",window=\"1m\"} 12\n"), "\(text())")
        #expect(text().contains("trackpipe_hits_too_late_for_size_total{stage=\"aggregate\",window=\"1h\"} 0\n"), "\(text())")
        #expect(text().contains("trackpipe_windows_finalized_early_total{stage=\"aggregate\",window=\"1m\"} 3\n"), "\(text())")
        #expect(text().contains("trackpipe_windows_finalized_early_total{stage=\"aggregate\",window=\"1h\"} 1\n"), "\(text())")
        #expect(text().contains("trackpipe_capacity_evictions_total{stage=\"aggregate\"} 1\n"), "one time the cap was reached, whatever the sizes it evicted")
    }
}

/// The monitoring files under deploy/, parsed.
enum MonitoringFiles {
    static func alertRules() throws -> [YAMLNode] {
        let file = try DeployFiles.yaml("deploy/prometheus/alerts.yml")
        var rules: [YAMLNode] = []
        for group in file["groups"].sequence ?? [] {
            rules += (YAMLNode(group)["rules"].sequence ?? []).map { YAMLNode($0) }
        }
        return rules
    }

    static func dashboard() throws -> [String: Any] {
        let data = try Data(contentsOf: DeployFiles.root.appendingPathComponent("deploy/grafana/dashboards/trackpipe.json"))
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw DeployFileError("deploy/grafana/dashboards/trackpipe.json is not a JSON object")
        }
        return object
    }

    /// Every panel, rows included, also those nested in collapsed rows.
    static func panels(_ dashboard: [String: Any]) -> [[String: Any]] {
        let top = dashboard["panels"] as? [[String: Any]] ?? []
        return top.flatMap { [$0] + ($0["panels"] as? [[String: Any]] ?? []) }
    }

    static func queries(_ dashboard: [String: Any]) -> [String] {
        panels(dashboard).flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
    }

    /// The PromQL of every alert rule and every dashboard panel.
    static func allQueries() throws -> [String] {
        try alertRules().compactMap { $0["expr"].string } + queries(dashboard())
    }

    /// trackpipe's and the process's metric names a query refers to (`up` and other series
    /// Prometheus makes itself are not the worker's).
    static func metricNames(inQuery query: String) -> Set<String> {
        let pattern = try! NSRegularExpression(pattern: #"(?<![A-Za-z0-9_:$])((?:trackpipe|process)_[a-z0-9_]+)"#)
        return Set(pattern.matches(in: query, range: NSRange(query.startIndex..., in: query)).map {
            String(query[Range($0.range(at: 1), in: query)!])
        })
    }

    static func metricNamesUsed() throws -> Set<String> {
        try allQueries().reduce(into: Set<String>()) { $0.formUnion(metricNames(inQuery: $1)) }
    }

    /// The series names in a Prometheus text exposition.
    static func metricNames(inExposition text: String) -> Set<String> {
        Set(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { line in
                String(line.prefix { $0 != "{" && $0 != " " })
            })
    }

    /// The `[10m]` range selectors of a query.
    static func rangeSelectors(in query: String) -> [String] {
        let pattern = try! NSRegularExpression(pattern: #"\[([0-9]+[smhd])(?::[0-9]*[smhd]?)?\]"#)
        return pattern.matches(in: query, range: NSRange(query.startIndex..., in: query)).map {
            String(query[Range($0.range(at: 1), in: query)!])
        }
    }

    /// A Prometheus duration of one unit (`90s`, `15m`, `2h`) in seconds.
    static func seconds(_ text: String) throws -> Int {
        guard let unit = text.last, let value = Int(text.dropLast()), let scale = ["s": 1, "m": 60, "h": 3_600, "d": 86_400][String(unit)] else {
            throw DeployFileError("not a duration of one unit: \(text)")
        }
        return value * scale
    }
}

/// Programs the monitoring tests run: promtool and prometheus from Debian's package.
enum Executables {
    static func find(_ name: String) -> URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin"] {
            let candidate = URL(fileURLWithPath: directory).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return nil
    }

    /// Runs to completion; standard output and error together.
    static func run(_ executable: URL, _ arguments: [String], in directory: URL) throws -> (status: Int32, output: String) {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("trackpipe-tool-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let handle = try FileHandle(forWritingTo: output)
        defer { try? handle.close() }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = directory
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return (process.terminationStatus, (try? String(contentsOf: output, encoding: .utf8)) ?? "")
    }
}
