import CRdKafka

/// Facts about the linked C library, for `trackpipe version`, error messages, and the few places
/// that depend on how a particular librdkafka behaves inside (docs/compatibility.md).
public enum Librdkafka {
    /// The version of the librdkafka actually loaded at run time (not the headers').
    public static var version: String {
        string(from: rd_kafka_version_str(), or: "0x" + String(UInt32(truncatingIfNeeded: rd_kafka_version()), radix: 16))
    }

    /// The loaded library's version as librdkafka encodes it: 0xMMmmrrpp (major, minor,
    /// revision, pre-release; 0xff for a release), so 2.0.2 is 0x020002ff.
    static let versionNumber = UInt32(truncatingIfNeeded: rd_kafka_version())

    /// The versions whose consumed-record layout `ConsumerRecord.headerCount` relies on were
    /// checked for: 2.0.2 through 2.16.x (docs/compatibility.md). Outside them, librdkafka is
    /// asked for every count.
    static let headerCountInPlaceVersions: Range<UInt32> = 0x0200_0200..<0x0211_0000

    /// `fetch.queue.backoff.ms` exists from 2.2.0 on: from then on the fetcher backs a full
    /// queue off for that long instead of waiting for its broker thread to wake
    /// (`KafkaConsumer`'s `wakesFetcher`).
    static let fetchQueueBackoffVersion: UInt32 = 0x0202_0000

    /// From 2.3.0 on, a consumer whose cooperative-sticky group answered its join but never
    /// assigned it anything can be destroyed; before, librdkafka asserts (#4312).
    static let nullAssignorStateVersion: UInt32 = 0x0203_0000

    /// Whether `ConsumerRecord.headerCount` may read the count in place on the loaded library.
    static let readsHeaderCountInPlace = headerCountInPlaceVersions.contains(versionNumber)

    /// Whether the loaded library has `fetch.queue.backoff.ms`.
    static let hasFetchQueueBackoff = versionNumber >= fetchQueueBackoffVersion
}
