import Dispatch
import Windowing

/// Work that needs nothing but its own slice of a batch, done on `lanes` threads: `0..<count`
/// is cut into contiguous chunks, one per lane, and the results come back in chunk order, so
/// that whatever depends on order can follow on the calling thread.
func inParallelChunks<Result>(
    of count: Int, lanes: Int, _ work: @Sendable (Range<Int>) -> Result
) -> [Result] {
    let lanes = max(1, min(lanes, count))
    if lanes == 1 { return [work(0..<count)] }
    let chunk = (count + lanes - 1) / lanes
    var results = [Result?](repeating: nil, count: lanes)
    results.withUnsafeMutableBufferPointer { slots in
        let box = UnsafeSendable(slots)
        DispatchQueue.concurrentPerform(iterations: lanes) { lane in
            box.value[lane] = work(min(count, lane * chunk)..<min(count, (lane + 1) * chunk))
        }
    }
    // Safe: concurrentPerform returns once every lane has run, and lane `l` set slot `l`.
    return results.map { $0! }
}

/// Work on items that own their state (window tasks, an engine's shards), done on `lanes`
/// threads: lane `l` takes items `l`, `l + lanes`, ..., so each item is touched by one lane
/// only and needs no lock; the results come back in item order.
func inParallel<Item, Result>(
    _ items: inout [Item], lanes: Int, _ work: @Sendable (inout Item, Int) -> Result
) -> [Result] {
    let lanes = max(1, min(lanes, items.count))
    if lanes == 1 { return items.indices.map { work(&items[$0], $0) } }
    var results = [Result?](repeating: nil, count: items.count)
    items.withUnsafeMutableBufferPointer { itemSlots in
        results.withUnsafeMutableBufferPointer { resultSlots in
            let itemsBox = UnsafeSendable(itemSlots), resultsBox = UnsafeSendable(resultSlots)
            DispatchQueue.concurrentPerform(iterations: lanes) { lane in
                for index in stride(from: lane, to: itemsBox.value.count, by: lanes) {
                    resultsBox.value[index] = work(&itemsBox.value[index], index)
                }
            }
        }
    }
    // Safe: concurrentPerform returns once every lane has run, and the lanes' strides cover
    // every index.
    return results.map { $0! }
}

/// The stage's lanes, as the runner of a window engine's shards: the one place where window
/// work runs in parallel, whether the units are a stage's tasks or one task's shards. Public
/// for the benchmark, which times the engine's shards on them.
public struct Lanes: ShardRunner {
    public let count: Int

    public init(count: Int) { self.count = count }

    public func run<Shard: Sendable, Value: Sendable>(_ shards: inout [Shard], _ work: @Sendable (inout Shard, Int) -> Value) -> [Value] {
        inParallel(&shards, lanes: count, work)
    }
}

/// Lets a buffer be written by `concurrentPerform` workers, each to its own slots.
struct UnsafeSendable<Value>: @unchecked Sendable {
    // @unchecked: wraps only buffers whose slots are each written by exactly one worker and
    // read after `concurrentPerform` returns.
    var value: Value
    init(_ value: Value) { self.value = value }
}
