import Windowing

/// An input partition as the aggregate stage tells sources apart: by partition number and by
/// which log it belongs to. Positions are only comparable within one log: another input topic
/// under the same group, or the same topic deleted and created again, starts its offsets at 0
/// again, and those must never be taken for copies of the old positions.
struct SourceKey: Sendable, Hashable, Comparable {
    /// The log the partition belongs to (`SourceKey.incarnation(topic:epoch:)`).
    var incarnation: UInt64
    var partition: Int32

    static func < (a: Self, b: Self) -> Bool {
        (a.incarnation, a.partition) < (b.incarnation, b.partition)
    }

    /// What `Dictionary` asks for: the two fields mixed by `KeyedMix`, as the engine's tables of
    /// ids are, not by `Hasher`'s SipHash. A batch's marks and first sightings look every source
    /// of every record up: 244 instructions a lookup with SipHash, 49 with the mix (callgrind).
    @inline(__always)
    func _rawHashValue(seed: Int) -> Int {
        Int(truncatingIfNeeded: KeyedMix.hash(incarnation, UInt64(UInt32(bitPattern: partition)), seed: UInt64(truncatingIfNeeded: seed)))
    }

    /// A stable number for one incarnation of an input topic: FNV-1a over the topic's name, with
    /// the partition's epoch (which grows when the topic is found recreated) mixed in. Stable
    /// across processes and versions, since it is stored in checkpoints.
    static func incarnation<Name: Collection<UInt8>>(topic: Name, epoch: UInt32) -> UInt64 {
        DeliveryHash.fnv1a(topic) ^ (UInt64(epoch) &* 0x9E37_79B9_7F4A_7C15)
    }

    static func incarnation(topic: String, epoch: UInt32) -> UInt64 {
        incarnation(topic: topic.utf8, epoch: epoch)
    }
}
