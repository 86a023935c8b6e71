/// All deliveries of one window start held by one store, with the per-partition lowest offset
/// of their hits.
///
/// Offsets are tracked per window start rather than per delivery: only about
/// retention / size + a few slots are alive, so the safe commit offset is a tiny merge.
struct WindowSlot: Sendable {
    let start: Int64
    let end: Int64
    var deliveries: [String: DeliveryWindow] = [:]
    var minOffsets: [Int32: Int64] = [:]
    var entries = 0
    /// The first emission of this window has happened (watermark passed end + grace, or a
    /// flush); from then on changes are re-emitted as corrections.
    var emitted = false
    /// Deliveries changed since the last emission, each listed once.
    var dirtyIds: [String] = []
    /// Deliveries whose state changed since it was last handed out for the changelog, each
    /// listed once (kept only by stores that track state).
    var stateChangedIds: [String] = []
    // Offsets of one partition arrive in increasing order, so the common case is "same
    // partition, offset not lower than its known minimum": checked without a hash lookup.
    private var cachedPartition: Int32 = -1
    private var cachedMinOffset: Int64 = .max

    init(start: Int64, end: Int64) {
        self.start = start
        self.end = end
    }

    @inline(__always)
    mutating func noteOffset(partition: Int32, offset: Int64) {
        if partition == cachedPartition && offset >= cachedMinOffset { return }
        let lowest = Swift.min(minOffsets[partition] ?? .max, offset)
        minOffsets[partition] = lowest
        cachedPartition = partition
        cachedMinOffset = lowest
    }
}
