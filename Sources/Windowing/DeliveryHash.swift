/// Stable shard choice for a delivery.
///
/// Swift's `Hasher` is seeded per process, so it would move deliveries between shards from one
/// run to the next; FNV-1a over the UTF-8 bytes is stable, cheap for short ids and spreads
/// hex ids well enough for a handful of shards.
enum DeliveryHash {
    @inline(__always)
    static func fnv1a(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }

    @inline(__always)
    static func shard(of deliveryId: String, count: Int) -> Int {
        Int(truncatingIfNeeded: fnv1a(deliveryId) % UInt64(count))
    }
}
