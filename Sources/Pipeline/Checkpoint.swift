/// What the worker stores in Kafka's commit metadata next to each committed offset, so that a
/// restarted worker (or the next member to own the partition) can tell, during replay, which
/// hits were already final: those below `processedThrough` whose window was already evicted.
///
/// Encoded as `trackpipe/1 evicted=<ms> processed=<offset>`; anything else (another tool's
/// commit, an older format) decodes to nil and the partition replays from the offset alone.
public struct Checkpoint: Sendable, Equatable {
    /// Every window with `windowEnd + retention <= evictedBefore` had been evicted (epoch ms).
    public var evictedBefore: Int64
    /// The next offset the previous owner had not yet processed.
    public var processedThrough: Int64

    public init(evictedBefore: Int64, processedThrough: Int64) {
        self.evictedBefore = evictedBefore
        self.processedThrough = processedThrough
    }

    public var encoded: String { "trackpipe/1 evicted=\(evictedBefore) processed=\(processedThrough)" }

    public init?(decoding text: String?) {
        guard let text, text.hasPrefix("trackpipe/1 ") else { return nil }
        var evicted: Int64?
        var processed: Int64?
        for field in text.split(separator: " ").dropFirst() {
            let parts = field.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let value = Int64(parts[1]) else { return nil }
            switch parts[0] {
            case "evicted": evicted = value
            case "processed": processed = value
            default: continue
            }
        }
        guard let evicted, let processed else { return nil }
        self.init(evictedBefore: evicted, processedThrough: processed)
    }
}
