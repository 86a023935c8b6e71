import Foundation

/// Runs the built `trackpipe` executable, as a user would, for end-to-end tests.
struct TrackpipeBinary {
    struct Result {
        var exitCode: Int32
        var stdout: String
        var stderr: String
        var stdoutLines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init) }
    }

    enum LocateError: Error, CustomStringConvertible {
        case notFound([String])
        var description: String {
            switch self {
            case .notFound(let paths): "trackpipe binary not found (build it with `swift build --product trackpipe`); looked in: \(paths.joined(separator: ", "))"
            }
        }
    }

    let url: URL

    /// The products directory holds both the test bundle and the executables: on Linux
    /// `Bundle.main.bundleURL` is that directory, on macOS it is the `.xctest` bundle inside it.
    /// `TRACKPIPE_BINARY` overrides the search.
    static func locate() throws -> TrackpipeBinary {
        let fm = FileManager.default
        var candidates: [URL] = []
        if let override = ProcessInfo.processInfo.environment["TRACKPIPE_BINARY"] {
            candidates.append(URL(fileURLWithPath: override))
        }
        let bundle = Bundle.main.bundleURL
        candidates.append(bundle.appendingPathComponent("trackpipe"))
        candidates.append(bundle.deletingLastPathComponent().appendingPathComponent("trackpipe"))
        for bundle in Bundle.allBundles where bundle.bundleURL.pathExtension == "xctest" {
            candidates.append(bundle.bundleURL.deletingLastPathComponent().appendingPathComponent("trackpipe"))
        }
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug/trackpipe"))
        for candidate in candidates where fm.isExecutableFile(atPath: candidate.path) {
            return TrackpipeBinary(url: candidate)
        }
        throw LocateError.notFound(candidates.map(\.path))
    }

    /// Runs with `arguments`, feeding `stdin` bytes. Standard streams go through temporary files,
    /// so a large output cannot deadlock on a full pipe. `environment` is added to this
    /// process's own.
    func run(_ arguments: [String], stdin: [UInt8] = [], environment: [String: String] = [:]) throws -> Result {
        let fm = FileManager.default
        let dir = fm.temporaryDirectory.appendingPathComponent("trackpipe-e2e-\(UUID().uuidString)")
        try fm.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? fm.removeItem(at: dir) }
        let inURL = dir.appendingPathComponent("stdin"), outURL = dir.appendingPathComponent("stdout"), errURL = dir.appendingPathComponent("stderr")
        try Data(stdin).write(to: inURL)
        fm.createFile(atPath: outURL.path, contents: nil)
        fm.createFile(atPath: errURL.path, contents: nil)
        let input = try FileHandle(forReadingFrom: inURL)
        let output = try FileHandle(forWritingTo: outURL)
        let error = try FileHandle(forWritingTo: errURL)
        defer { try? input.close(); try? output.close(); try? error.close() }

        let process = Process()
        process.executableURL = url
        process.arguments = arguments
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        process.standardInput = input
        process.standardOutput = output
        process.standardError = error
        try process.run()
        process.waitUntilExit()
        return Result(
            exitCode: process.terminationStatus,
            stdout: String(decoding: try Data(contentsOf: outURL), as: UTF8.self),
            stderr: String(decoding: try Data(contentsOf: errURL), as: UTF8.self))
    }
}

/// A `trackpipe` process left running in the background (a worker, an embedded broker), with
/// its output in files so that it can be read at any time and never blocks on a full pipe.
final class BackgroundTrackpipe {
    let process = Process()
    let directory: URL
    var stdoutURL: URL { directory.appendingPathComponent("stdout") }
    var stderrURL: URL { directory.appendingPathComponent("stderr") }

    init(_ binary: TrackpipeBinary, _ arguments: [String], environment: [String: String] = [:]) throws {
        let fm = FileManager.default
        directory = fm.temporaryDirectory.appendingPathComponent("trackpipe-bg-\(UUID().uuidString)")
        try fm.createDirectory(at: directory, withIntermediateDirectories: true)
        fm.createFile(atPath: directory.appendingPathComponent("stdout").path, contents: nil)
        fm.createFile(atPath: directory.appendingPathComponent("stderr").path, contents: nil)
        process.executableURL = binary.url
        process.arguments = arguments
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: stdoutURL)
        process.standardError = try FileHandle(forWritingTo: stderrURL)
        try process.run()
    }

    var stdout: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for exit up to `seconds`; nil if still running.
    func waitForExit(seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        return process.isRunning ? nil : process.terminationStatus
    }

    /// Polls every `interval` seconds until `condition` holds or `seconds` pass; returns whether
    /// it held. `seconds` bounds a hang (see `SafetyDeadline`); it is not what a test checks.
    static func waitUntil(seconds: Double, every interval: Double = 0.05, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(useconds_t(interval * 1_000_000))
        }
        return try condition()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: directory)
    }
}
