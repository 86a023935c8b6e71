import ArgumentParser

/// The trackpipe builds a benchmark measures: this one, and, to compare with, an earlier build
/// run the same way in the same rounds (the ratio of the two is the figure, not the seconds).
package struct TrackpipeBuilds: ParsableArguments {
    @Option(help: "Path of the trackpipe binary (default: next to this one).") package var trackpipe: String?
    @Option(help: "Another trackpipe binary (an earlier build), measured the same way in the same rounds.") package var baseline: String?

    package init() {}

    /// Both paths, each checked to be an executable.
    package func resolved() throws -> (binary: String, baseline: String?) {
        (try BenchSupport.trackpipeBinary(trackpipe), try baseline.map { try BenchSupport.trackpipeBinary($0) })
    }
}
