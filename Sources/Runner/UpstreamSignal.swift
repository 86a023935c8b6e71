import Synchronization

/// Lets one runner tell another that it has finished and everything it produced is
/// acknowledged: the bound of a two-stage `--until-end` run, whose aggregate stage can only
/// know where the repartition topic ends once the normalize stage has stopped writing to it.
package final class UpstreamSignal: Sendable {
    private let done = Atomic<Bool>(false)

    package init() {}

    package func finish() { done.store(true, ordering: .sequentiallyConsistent) }

    package var isFinished: Bool { done.load(ordering: .sequentiallyConsistent) }
}
