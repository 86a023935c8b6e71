import ArgumentParser

/// The trackpipe builds a benchmark measures: this one, and, to compare with, an earlier build
/// run the same way in the same rounds (the ratio of the two is the figure, not the seconds).
struct TrackpipeBuilds: ParsableArguments {
    @Option(help: "Path of the trackpipe binary (default: next to this one).") var trackpipe: String?
    @Option(help: "Another trackpipe binary (an earlier build), measured the same way in the same rounds.") var baseline: String?

    /// Both paths, each checked to be an executable.
    func resolved() throws -> (binary: String, baseline: String?) {
        (try BenchSupport.trackpipeBinary(trackpipe), try baseline.map { try BenchSupport.trackpipeBinary($0) })
    }
}
