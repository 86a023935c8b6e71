import Foundation
import Prometheus

/// The process's own series under the names every Prometheus client library uses
/// (`process_resident_memory_bytes`, `process_start_time_seconds`), so that a memory panel or a
/// restart alert written for any exporter works here too. swift-prometheus has no process
/// collector; these are read from `/proc/self` at each scrape, and stay absent where there is
/// no `/proc` (macOS).
struct ProcessMetrics: Sendable {
    private let residentMemory: Gauge?
    private let virtualMemory: Gauge?

    init(registry: PrometheusCollectorRegistry) {
        guard let start = Self.startTimeSeconds() else {
            residentMemory = nil
            virtualMemory = nil
            return
        }
        registry.gauge("process_start_time_seconds", help: "Start time of the process since the Unix epoch, in seconds.").set(start)
        residentMemory = registry.gauge("process_resident_memory_bytes", help: "Resident memory size in bytes.")
        virtualMemory = registry.gauge("process_virtual_memory_bytes", help: "Virtual memory size in bytes.")
        refresh()
    }

    /// Reads the memory sizes again (two numbers from `/proc/self/statm`).
    func refresh() {
        guard let residentMemory, let virtualMemory, let fields = Self.fields(of: "/proc/self/statm"), fields.count >= 2,
            let pages = Double(fields[0]), let resident = Double(fields[1])
        else { return }
        let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
        virtualMemory.set(pages * pageSize)
        residentMemory.set(resident * pageSize)
    }

    /// The boot time (`btime` in `/proc/stat`) plus the process's start in clock ticks after
    /// boot (field 22 of `/proc/self/stat`).
    static func startTimeSeconds() -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
            let boot = (try? String(contentsOfFile: "/proc/stat", encoding: .utf8))?
                .split(separator: "\n").first(where: { $0.hasPrefix("btime ") })
                .flatMap({ Double($0.dropFirst("btime ".count)) }),
            // The command name (field 2) is in parentheses and may hold spaces: count after it.
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let after = stat[stat.index(after: close)...].split(separator: " ")
        // `after` starts at field 3 (the state), so field 22 is at index 19.
        guard after.count > 19, let ticks = Double(after[19]) else { return nil }
        return boot + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    private static func fields(of path: String) -> [Substring]? {
        (try? String(contentsOfFile: path, encoding: .utf8))?.split(whereSeparator: { $0 == " " || $0 == "\n" })
    }
}
