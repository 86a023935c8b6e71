/// What one source partition says about its event time: the highest event time it has
/// delivered, and whether it has gone quiet.
///
/// Behind a shuffle (the repartition topic) the records of one source partition reach many
/// downstream partitions, and most of them see few or none of its records. The marks travel
/// with the records and on their own, as Flink carries watermarks across a network shuffle, so
/// that every downstream task can take the minimum over all sources instead of trusting the
/// sources it happens to hear from (Kafka Streams' stream time, the maximum seen, lets one
/// fast partition make everyone else's hits late).
public struct SourceMark: Sendable, Hashable {
    public var source: Int32
    /// Highest event time the source has delivered; nil while it has delivered none.
    public var watermark: Int64?
    /// The source's reader has seen nothing on it for the idle timeout: it stops holding the
    /// watermark back until it delivers again.
    public var idle: Bool

    public init(source: Int32, watermark: Int64?, idle: Bool = false) {
        self.source = source
        self.watermark = watermark
        self.idle = idle
    }
}
