/// Bounds that keep one hostile message from costing more than a bounded amount of time
/// and memory. Hits are a few hundred bytes; the defaults leave ample headroom.
public struct NormalizerLimits: Sendable, Equatable {
    /// Messages longer than this are rejected as `too_large` before any parsing.
    public var maxMessageBytes: Int = 1_048_576
    /// Containers nested deeper than this (the top-level object is depth 1) are rejected as
    /// `too_deep`. Real payloads nest 4 levels (`userInfo.aps.alert`).
    public var maxDepth: Int = 32
    /// Ids whose UTF-8 form is longer than this are rejected as `id_too_long`: ids become
    /// Kafka keys and state-store keys, so they must stay small.
    public var maxIdBytes: Int = 256
    /// Kafka records with more headers than this are rejected as `too_many_headers` before
    /// anything else. The normalizer never sees headers (it reads the value); the worker's
    /// intake checks this one. A hit needs no headers, tracing adds a few; hundreds mean a
    /// producer that should not write to the topic, and librdkafka parses every one of them.
    public var maxHeaders: Int = 64

    public init(maxMessageBytes: Int = 1_048_576, maxDepth: Int = 32, maxIdBytes: Int = 256, maxHeaders: Int = 64) {
        self.maxMessageBytes = maxMessageBytes
        self.maxDepth = maxDepth
        self.maxIdBytes = maxIdBytes
        self.maxHeaders = maxHeaders
    }
}
