import ArgumentParser
import Foundation

/// The long checks, not part of CI: each runs as long as asked and checks what the worker did
/// against the tests' reference (the deterministic simulators' schedules, a live soak's output,
/// the state benchmark's outputs).
/// It lives under Tests/ because it links the test modules (the reference model and the
/// simulators), which no product may; `swift build -c release --product trackpipe-check` builds it.
@main
struct TrackpipeCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trackpipe-check",
        abstract: "Long checks of trackpipe against the tests' reference (build with -c release): the simulators, the soak and the state benchmark.",
        subcommands: [SimulateCommand.self, SimulateRunnerCommand.self, SoakCommand.self, StateCommand.self]
    )
}

/// Monotonic seconds, for rates and deadlines.
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// A check that could not run (as opposed to one that ran and failed, which exits 1).
struct CheckError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The cases `names` name (`default` when none is given), or an error that lists the names there are.
func named<Named: RawRepresentable & CaseIterable>(_ names: [String], _ what: String, default all: [Named]) throws -> [Named]
where Named.RawValue == String {
    let chosen = try names.map { name in
        guard let value = Named(rawValue: name) else {
            throw ValidationError("no \(what) \(name); one of: \(Named.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }
    return chosen.isEmpty ? all : chosen
}
