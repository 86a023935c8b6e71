/// Size facts of one store, gathered on demand (stats, capacity)
/// rather than after every batch, so tiny batches stay cheap.
struct StoreSnapshot: Sendable {
    var openWindows = 0
    /// The end of the oldest window not emitted yet.
    var oldestOpenEnd: Int64?
    var retainedWindows = 0
    var entries = 0
    var entriesByWindowStart: [Int64: Int] = [:]
}
