import Dispatch

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
    return results.map { $0! }
}
