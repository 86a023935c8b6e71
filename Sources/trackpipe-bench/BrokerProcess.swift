import Foundation

/// `trackpipe embedded-broker` in a process of its own, so that the contenders of a benchmark
/// do not share the broker's threads (and so that its CPU time can be told apart from theirs).
final class BrokerProcess {
    let bootstrapServers: String
    private let process: Process

    /// Starts the broker with these topics (every one with `partitions` partitions) and waits
    /// for it to print its address.
    init(binary: String, topics: [String], partitions: Int) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["embedded-broker", "--partitions", "\(partitions)", "--log-level", "error"] + topics.flatMap { ["--topic", $0] }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        var text = ""
        while !text.contains("\n") {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw BenchError("embedded-broker exited before printing its address") }
            text += String(decoding: chunk, as: UTF8.self)
        }
        guard let line = text.split(separator: "\n").first, line.hasPrefix("bootstrap: ") else {
            throw BenchError("embedded-broker printed \(text) instead of its address")
        }
        bootstrapServers = String(line.dropFirst("bootstrap: ".count))
    }

    /// CPU seconds (user + system) the broker has used so far, from /proc.
    var cpuSeconds: Double { ProcessCPU.seconds(pid: process.processIdentifier) }
    var processIdentifier: Int32 { process.processIdentifier }

    func stop() {
        // The broker says it is stopping on the shared stderr: what this process printed must
        // be out first (every stream: `stdout` is not concurrency-safe to name), or that line lands
        // in the middle of the last row of a report written to a file.
        fflush(nil)
        process.terminate()
        process.waitUntilExit()
    }

    deinit { if process.isRunning { stop() } }
}

/// CPU time of processes, in seconds.
enum ProcessCPU {
    /// User + system time of a running process (fields 14 and 15 of /proc/PID/stat).
    static func seconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, so utime (14) and stime (15) are at 11, 12.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// User + system time, and page faults, of every child process this one has waited for.
    /// The faults count fresh memory the kernel had to zero and map: on this benchmark they are
    /// most of the difference between trackpipe's consumer thread and kcat's (see
    /// docs/performance.md).
    static func reapedChildren() -> (seconds: Double, pageFaults: Int) {
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        func s(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return (s(usage.ru_utime) + s(usage.ru_stime), usage.ru_minflt + usage.ru_majflt)
    }
}

/// One timed run of a contender process: wall time, the moment its group assignment
/// arrived (read from its stderr), and the CPU it and the broker used.
struct TimedRun {
    var wall: Double
    /// Seconds from start until the first line containing the assignment marker; nil if none.
    var joined: Double?
    var cpu: Double
    /// Minor and major page faults of the contender's process.
    var pageFaults: Int
    var brokerCPU: Double
    var stdout: String
    var stderr: String

    /// Wall time after the group join: what the contender's own work costs.
    var afterJoin: Double { wall - (joined ?? 0) }

    /// Runs `binary` with `arguments` to its end. With `discardingOutput` its standard output
    /// goes to /dev/null (as a raw consume's records would), and `stdout` stays empty.
    static func measure(
        _ binary: String, _ arguments: [String], broker: BrokerProcess, assignmentMarker: String, discardingOutput: Bool = false
    ) throws -> TimedRun {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = discardingOutput ? FileHandle.nullDevice : out
        process.standardError = err
        let reader = StderrWatcher(marker: assignmentMarker)
        let cpuBefore = ProcessCPU.reapedChildren()
        let brokerBefore = broker.cpuSeconds
        let start = BenchSupport.now()
        try process.run()
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
            wall: wall, joined: reader.joined, cpu: usage.seconds - cpuBefore.seconds, pageFaults: usage.pageFaults - cpuBefore.pageFaults,
            brokerCPU: broker.cpuSeconds - brokerBefore, stdout: stdout, stderr: reader.text)
        guard process.terminationStatus == 0 else {
            throw BenchError("\(binary) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus): \(run.stderr.suffix(2000))")
        }
        return run
    }
}

/// Reads a child's stderr to its end, noting when a line with the marker first appeared.
final class StderrWatcher: @unchecked Sendable {
    // @unchecked: written by the one reading thread; read after `read` has returned (the
    // caller waits on a semaphore that the reading thread signals).
    let marker: String
    private(set) var joined: Double?
    private(set) var text = ""

    init(marker: String) { self.marker = marker }

    func read(_ handle: FileHandle, start: Double) {
        while true {
            let chunk = handle.availableData
            if chunk.isEmpty { return }
            text += String(decoding: chunk, as: UTF8.self)
            if joined == nil, text.contains(marker) { joined = BenchSupport.now() - start }
        }
    }
}
