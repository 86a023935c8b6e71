/// What the previous run of the worker had settled for one partition, read back from the
/// Kafka commit metadata.
///
/// A hit below `replayBefore` whose window expires at or before `evictedBefore` was either in
/// a window the previous run emitted for the last time or was dead-lettered by it; counting
/// it again would double it, reporting it as too late would dead-letter it twice.
struct RestorePoint: Sendable, Hashable {
    var replayBefore: Int64
    var evictedBefore: Int64
}
