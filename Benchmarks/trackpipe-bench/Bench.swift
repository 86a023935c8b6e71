import ArgumentParser

/// Benchmarks live here, not in timed tests: the machine is shared and noisy, so every
/// figure is reported as a ratio against a baseline measured in the same run.
@main
struct TrackpipeBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trackpipe-bench",
        abstract: "Benchmarks for trackpipe (build with -c release).",
        subcommands: [
            ConsumeBenchmark.self,
            GenerateBenchmark.self,
            NormalizeBenchmark.self,
            WindowingBenchmark.self,
            PipelineBenchmark.self,
            ReplayBenchmark.self,
            RestoreBenchmark.self,
            CampaignBenchmark.self,
            FreshnessBenchmark.self,
        ]
    )
}
