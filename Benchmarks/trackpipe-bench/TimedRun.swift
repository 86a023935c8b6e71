import Benchmarking
import Foundation

/// One timed run of a contender process: wall time, the moment its group assignment
/// arrived (read from its stderr), and the CPU it and the broker used, in all and from that
/// moment on.
struct TimedRun {
    var wall: Double
    /// Seconds from start until the first line containing the assignment marker; nil if none.
    var joined: Double?
    var cpu: Double
    /// The CPU the process had used when its assignment arrived: its start-up and the group
    /// join, which a worker pays once per start or rebalance, not per hit. nil if none arrived.
    var cpuAtJoin: Double?
    /// Minor and major page faults of the contender's process.
    var pageFaults: Int
    var brokerCPU: Double
    var stdout: String
    var stderr: String

    /// Wall time after the group join: what the contender's own work costs.
    var afterJoin: Double { wall - (joined ?? 0) }

    /// The CPU from the assignment to the end: what the hits of a live run cost, with the
    /// commits and the leaving at the end.
    var cpuAfterJoin: Double { cpu - (cpuAtJoin ?? 0) }

    /// Runs `binary` with `arguments` to its end. With `discardingOutput` its standard output
    /// goes to /dev/null (as a raw consume's records would), and `stdout` stays empty.
    static func measure(
        _ binary: String, _ arguments: [String], broker: BrokerProcess, assignmentMarker: String, discardingOutput: Bool = false
    ) throws -> TimedRun {
        let out = Pipe()
        let err = Pipe()
        let process = BenchSupport.process(binary, arguments, output: discardingOutput ? FileHandle.nullDevice : out, errors: err)
        let cpuBefore = ProcessCPU.reapedChildren()
        let brokerBefore = broker.cpuSeconds
        let start = BenchSupport.now()
        try process.run()
        let pid = process.processIdentifier
        let reader = StderrWatcher(marker: assignmentMarker) { ProcessCPU.preciseSeconds(pid: pid) }
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            reader.read(err.fileHandleForReading, start: start)
            done.signal()
        }
        let stdout = discardingOutput ? "" : String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let wall = BenchSupport.now() - start
        done.wait()
        let usage = ProcessCPU.reapedChildren()
        let run = TimedRun(
            wall: wall, joined: reader.joined, cpu: usage.seconds - cpuBefore.seconds, cpuAtJoin: reader.cpuAtJoin, pageFaults: usage.pageFaults - cpuBefore.pageFaults,
            brokerCPU: broker.cpuSeconds - brokerBefore, stdout: stdout, stderr: reader.text)
        guard process.terminationStatus == 0 else {
            throw BenchError("\(binary) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus): \(run.stderr.suffix(2000))")
        }
        return run
    }
}

/// Reads a child's stderr to its end, noting when a line with the marker first appeared, and
/// the child's CPU then (`cpu`, asked at once, while the child runs on).
final class StderrWatcher: @unchecked Sendable {
    // @unchecked: written by the one reading thread; read after `read` has returned (the
    // caller waits on a semaphore that the reading thread signals).
    let marker: String
    let cpu: @Sendable () -> Double?
    private(set) var joined: Double?
    private(set) var cpuAtJoin: Double?
    private(set) var text = ""

    init(marker: String, cpu: @escaping @Sendable () -> Double? = { nil }) {
        self.marker = marker
        self.cpu = cpu
    }

    func read(_ handle: FileHandle, start: Double) {
        while true {
            let chunk = handle.availableData
            if chunk.isEmpty { return }
            text += String(decoding: chunk, as: UTF8.self)
            if joined == nil, text.contains(marker) {
                joined = BenchSupport.now() - start
                cpuAtJoin = cpu()
            }
        }
    }
}
