import Foundation
import Kafka

/// Shared pieces of the Kafka benchmarks: a preloaded embedded topic and a kcat baseline.
package enum BenchSupport {
    package static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Fills `topic` with `values`, spread round-robin over its partitions, with the given
    /// record timestamps (epoch ms) or, without them, the current time.
    package static func preload(
        _ broker: EmbeddedBroker, topic: String, partitions: Int, values: [[UInt8]], timestamps: [Int64]? = nil
    ) throws {
        try broker.createTopic(topic, partitions: partitions)
        try preload(
            bootstrapServers: broker.bootstrapServers, topic: topic, partitions: partitions, values: values, timestamps: timestamps)
    }

    /// Fills an existing `topic` of the cluster at `bootstrapServers`, as `preload` above.
    package static func preload(
        bootstrapServers: String, topic: String, partitions: Int, values: [[UInt8]], timestamps: [Int64]? = nil,
        placement: [Int32]? = nil
    ) throws {
        let producer = try KafkaProducer(
            config: KafkaConfig([
                "bootstrap.servers": bootstrapServers, "linger.ms": "20", "batch.num.messages": "10000",
                "queue.buffering.max.messages": "500000", "log_level": "3",
            ]))
        for (index, value) in values.enumerated() {
            try producer.send(
                topic: topic, partition: placement?[index] ?? Int32(index % partitions), key: Array("k\(index % 5000)".utf8), value: value,
                timestamp: timestamps?[index])
        }
        try producer.flush(timeoutMilliseconds: 120_000)
    }

    /// Wall seconds `body` takes.
    package static func seconds(_ body: () throws -> Void) rethrows -> Double {
        let start = now()
        try body()
        return now() - start
    }

    /// Where kcat is installed; nil if it is not.
    package static var kcat: String? {
        ["/usr/bin/kcat", "/usr/local/bin/kcat"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
    }

    /// A process of `binary` with `arguments`, not started yet; its output and errors go where
    /// given (nil: this process's own), by default nowhere.
    package static func process(
        _ binary: String, _ arguments: [String], output: Any? = FileHandle.nullDevice, errors: Any? = FileHandle.nullDevice
    ) -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = errors
        return process
    }

    /// Runs kcat with these arguments, output discarded; returns wall seconds, or nil if kcat is missing.
    package static func timeKcat(_ arguments: [String]) throws -> Double? {
        guard let kcat else { return nil }
        let process = process(kcat, arguments)
        let elapsed = try seconds {
            try process.run()
            process.waitUntilExit()
        }
        guard process.terminationStatus == 0 else {
            throw BenchError("kcat \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
        }
        return elapsed
    }

    /// The trackpipe binary: `override`, or the one built next to this benchmark.
    package static func trackpipeBinary(_ override: String?) throws -> String {
        let binary = override
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("trackpipe").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw BenchError("no trackpipe binary at \(binary): swift build -c release --product trackpipe")
        }
        return binary
    }

    package static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted[sorted.count / 2]
    }

    package static func rate(_ count: Int, _ seconds: Double) -> String {
        String(format: "%.0f msg/s", Double(count) / seconds)
    }

    /// `value` rounded, its thousands grouped with commas: 12,345,678.
    package static func grouped(_ value: Double) -> String {
        var digits = String(Int(value.rounded()))
        var grouped = ""
        while digits.count > 3 {
            grouped = "," + digits.suffix(3) + grouped
            digits.removeLast(3)
        }
        return digits + grouped
    }
}

package struct BenchError: Error, CustomStringConvertible {
    package var description: String
    package init(_ description: String) { self.description = description }
}
