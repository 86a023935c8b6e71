import Logging

/// What every part of a runner is given: the stage's name (every log line begins with it), the
/// runner's settings, where it logs and what it counts. Made once, by the `StageRunner`.
struct RunnerContext: Sendable {
    let stageName: String
    let settings: RunnerSettings
    let logger: Logger
    let metrics: StageMetrics?
}

/// A part of a runner (and the runner itself): it reads its context's members as its own.
protocol RunnerPart {
    var context: RunnerContext { get }
}

extension RunnerPart {
    var stageName: String { context.stageName }
    var settings: RunnerSettings { context.settings }
    var logger: Logger { context.logger }
    var metrics: StageMetrics? { context.metrics }
    /// The runner's input topic.
    var topic: String { context.settings.topic }
    var group: String { context.settings.group }
}
