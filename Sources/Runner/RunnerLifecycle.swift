import Kafka

/// Where a `StageRunner`'s run stands, each state carrying what it owns, as swift-kafka-client
/// keeps its client inside the cases of one state: nothing before `begin`, the clients while it
/// runs, the first fatal error beside them once there is one, the closed consumer after.
enum RunnerLifecycle {
    /// Before `begin`: no clients yet.
    case idle
    /// From `begin` on: the loop turns, commits and is told of rebalances.
    case running(RunnerClients)
    /// A fatal error was found where it could not be thrown (inside a rebalance callback), or
    /// the run threw it: the loop stops on it and nothing more is committed. The clients stay,
    /// to be closed.
    case failed(RunnerClients, PipelineError)
    /// The consumer is closed (`finish` or `abandon`). It is kept for the watermarks it last
    /// saw, which a report after the end reads for the lag.
    case closed(any ConsumerClient)

    /// The clients, from `begin` until they are closed.
    var clients: RunnerClients? {
        switch self {
        case .running(let clients), .failed(let clients, _): clients
        case .idle, .closed: nil
        }
    }

    /// The consumer, open or closed; nil before `begin`.
    var consumer: (any ConsumerClient)? {
        if case .closed(let consumer) = self { return consumer }
        return clients?.consumer
    }

    var failure: PipelineError? {
        if case .failed(_, let error) = self { return error }
        return nil
    }

    /// The run failed: the first fatal error is the one kept, the one the run stops on.
    mutating func fail(_ error: any Error) {
        guard case .running(let clients) = self else { return }
        self = .failed(clients, error as? PipelineError ?? .kafka("\(error)"))
    }

    /// The consumer was closed.
    mutating func close() {
        if let consumer = clients?.consumer { self = .closed(consumer) }
    }
}

/// The clients of a run: the consumer of its input and the channel of its output. A class, so
/// that the loop and the rebalance callbacks inside its polls work on the one output channel,
/// never on copies of it.
final class RunnerClients {
    let consumer: any ConsumerClient
    var output: OutputChannel

    init(consumer: any ConsumerClient, output: OutputChannel) {
        self.consumer = consumer
        self.output = output
    }
}
