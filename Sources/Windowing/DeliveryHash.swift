import TrackingDomain

/// Stable shard choice for a delivery.
///
/// Swift's `Hasher` is seeded per process, so it would move deliveries between shards from one
/// run to the next; FNV-1a over the UTF-8 bytes is stable, cheap for short ids and spreads
/// hex ids well enough for a handful of shards.
public enum DeliveryHash {
    @inline(__always)
    static func fnv1a(_ id: DeliveryID) -> UInt64 { id.withUTF8 { fnv1a($0) } }

    /// FNV-1a over any bytes: also the stable numbers of input incarnations and changelog sources.
    @inlinable @inline(__always)
    public static func fnv1a(_ bytes: some Sequence<UInt8>) -> UInt64 {
        bytes.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x0000_0100_0000_01b3 }
    }

    @inline(__always)
    static func shard(of deliveryId: DeliveryID, count: Int) -> Int {
        Int(truncatingIfNeeded: fnv1a(deliveryId) % UInt64(count))
    }

    /// The repartition partition of a delivery: every instance routes a delivery to the same
    /// partition, whatever the producer's partitioner. The hash is remixed first so that the
    /// shard a delivery gets inside its partition does not follow from its partition.
    @inline(__always)
    public static func partition(of deliveryId: DeliveryID, count: Int32) -> Int32 {
        let mixed = (fnv1a(deliveryId) &* 0x9E37_79B9_7F4A_7C15) >> 32
        return Int32(truncatingIfNeeded: mixed % UInt64(max(count, 1)))
    }
}
