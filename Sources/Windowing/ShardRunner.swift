/// Runs the engine's shards for one call. The engine never starts a thread: it hands each
/// shard's work to a runner, and only a runner the caller supplies may run shards at the same
/// time (the pipeline's lanes do). Whatever the runner, output is the same, since the shards
/// touch nothing but their own store and the engine merges their results in shard order.
public protocol ShardRunner: Sendable {
    /// Calls `work` exactly once for each element of `shards` (with its index), each call
    /// mutating only its own element, and returns the results in shard order.
    func run<Shard: Sendable, Value: Sendable>(_ shards: inout [Shard], _ work: @Sendable (inout Shard, Int) -> Value) -> [Value]
}

/// Shards one after the other on the calling thread: for tests, the benchmark, and any caller
/// without threads to spare.
public struct ShardsInTurn: ShardRunner {
    public init() {}

    public func run<Shard: Sendable, Value: Sendable>(_ shards: inout [Shard], _ work: @Sendable (inout Shard, Int) -> Value) -> [Value] {
        var results: [Value] = []
        results.reserveCapacity(shards.count)
        for index in shards.indices { results.append(work(&shards[index], index)) }
        return results
    }
}
