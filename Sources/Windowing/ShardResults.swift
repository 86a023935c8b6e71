/// Fixed slots, one per shard, each written by exactly one shard queue and read by the engine
/// after the dispatch group completes: no lock needed, no shared array mutated concurrently.
final class ShardResults<Value: Sendable>: @unchecked Sendable {
    private let storage: UnsafeMutablePointer<Value?>
    let count: Int

    init(count: Int) {
        self.count = count
        storage = .allocate(capacity: count)
        storage.initialize(repeating: nil, count: count)
    }

    deinit {
        storage.deinitialize(count: count)
        storage.deallocate()
    }

    func set(_ index: Int, _ value: Value) {
        storage[index] = value
    }

    func values() -> [Value] {
        (0..<count).map { storage[$0]! }
    }
}
