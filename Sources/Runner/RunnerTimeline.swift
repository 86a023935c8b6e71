import Foundation

/// Where a runner's wall time went, phase by phase (`run --timings`): the evidence for what a
/// worker waits on. A phase is timed around whole calls (a poll, a batch, a commit), so the
/// cost is a few clock reads per batch; produce calls are timed one by one only when asked.
public struct RunnerTimeline: Sendable {
    public enum Phase: Int, CaseIterable, Sendable {
        /// Polls that returned records (fetching from librdkafka's queue, decoding nothing).
        case polling
        /// Polls that returned nothing in their timeout: the worker had nothing to do.
        case idlePolling
        /// The stage working on batches, produce calls included.
        case processing
        /// Of `processing`: handing records to the producer (only with per-send timing).
        case producing
        case ticking
        /// Serving the producer's delivery reports between batches.
        case servingReports
        /// Waiting for every record sent so far to be acknowledged before a commit.
        case awaitingAcknowledgements
        case committing
        case reporting
        /// The end of a bounded run: the stage's last emissions.
        case finishing
        /// Reading window state back from the state topic.
        case restoring
        case closing

        var label: String {
            [
                "poll", "poll (nothing came)", "process", "of which produce", "tick", "delivery reports", "await acks", "commit", "report",
                "finish", "restore", "close",
            ][rawValue]
        }
    }

    public private(set) var seconds = [Double](repeating: 0, count: Phase.allCases.count)
    /// Seconds after the start when partitions were first assigned, the first record was
    /// handed to the stage, and the last one.
    public var assignedAt: Double?
    public var firstRecordAt: Double?
    public var lastRecordAt: Double?
    /// Seconds from start to the end of the run.
    public var total: Double = 0
    /// Offset commits made, and how many of them were made early because windows closed.
    public var commits = 0
    public var earlyCommits = 0
    let start = RunnerTimeline.now()

    public init() {}

    public subscript(phase: Phase) -> Double { seconds[phase.rawValue] }

    /// Adds the time since `from` to `phase`; returns now, to chain phases.
    @discardableResult
    mutating func add(_ phase: Phase, since from: Double) -> Double {
        let now = Self.now()
        seconds[phase.rawValue] += now - from
        return now
    }

    mutating func add(_ phase: Phase, seconds more: Double) {
        seconds[phase.rawValue] += more
    }

    /// Seconds since the runner started.
    func elapsed(at time: Double = RunnerTimeline.now()) -> Double { time - start }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// One line per stage for the run summary.
    public var text: String {
        func f(_ value: Double?) -> String { value.map { String(format: "%.2f", $0) } ?? "-" }
        let phases = Phase.allCases.filter { self[$0] >= 0.005 }.map { "\($0.label) \(f(self[$0]))" }
        return "assigned at \(f(assignedAt)) s, records from \(f(firstRecordAt)) s to \(f(lastRecordAt)) s, ended at \(f(total)) s; "
            + (phases.isEmpty ? "no phase took 5 ms" : phases.joined(separator: ", ") + " (s)")
            + "; \(commits) commits (\(earlyCommits) early, for closed windows)"
    }
}
