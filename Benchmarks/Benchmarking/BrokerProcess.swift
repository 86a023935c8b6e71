import Foundation

/// `trackpipe embedded-broker` in a process of its own, so that the contenders of a benchmark
/// do not share the broker's threads (and so that its CPU time can be told apart from theirs).
package final class BrokerProcess {
    package let bootstrapServers: String
    private let process: Process

    /// Starts the broker with these topics (every one with `partitions` partitions) and waits
    /// for it to print its address.
    package init(binary: String, topics: [String], partitions: Int) throws {
        let output = Pipe()
        process = BenchSupport.process(
            binary, ["embedded-broker", "--partitions", "\(partitions)", "--log-level", "error"] + topics.flatMap { ["--topic", $0] },
            output: output, errors: nil)
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
    package var cpuSeconds: Double { ProcessCPU.seconds(pid: process.processIdentifier) }
    package var processIdentifier: Int32 { process.processIdentifier }

    package func stop() {
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
package enum ProcessCPU {
    /// User + system time of a running process (fields 14 and 15 of /proc/PID/stat).
    package static func seconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, so utime (14) and stime (15) are at 11, 12.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The CPU time of a running process, every thread's (ended ones too), in nanoseconds'
    /// resolution: its CPU clock (`clock_getcpuclockid`). /proc's figures count in ticks of
    /// 10 ms, a few percent of a benchmark run. nil once the process is gone.
    package static func preciseSeconds(pid: Int32) -> Double? {
        var clock = clockid_t()
        var time = timespec()
        guard clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &time) == 0 else { return nil }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// User + system time, and page faults, of every child process this one has waited for.
    /// The faults count fresh memory the kernel had to zero and map: on this benchmark they are
    /// most of the difference between trackpipe's consumer thread and kcat's (see
    /// docs/performance.md).
    package static func reapedChildren() -> (seconds: Double, pageFaults: Int) {
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        func s(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return (s(usage.ru_utime) + s(usage.ru_stime), usage.ru_minflt + usage.ru_majflt)
    }
}
