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

    /// What `Dictionary` asks for: the two fields mixed by two multiplications (wyhash's
    /// folding step), not `Hasher`'s SipHash. A batch's marks and first sightings look every
    /// source of every record up; nobody outside chooses the keys (partition numbers, and a
    /// hash of the topic's name that the operator configured), so no secret is needed.
    @inline(__always)
    func _rawHashValue(seed: Int) -> Int {
        @inline(__always) func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
            let product = a.multipliedFullWidth(by: b)
            return product.high ^ product.low
        }
        let mixed = fold(incarnation ^ UInt64(truncatingIfNeeded: seed) ^ 0xA076_1D64_78BD_642F, UInt64(UInt32(bitPattern: partition)) ^ 0xE703_7ED1_A0B4_28DB)
        return Int(truncatingIfNeeded: fold(mixed ^ 0x8EBC_6AF0_9C88_C6E3, 0x5899_65CC_7537_4CC3))
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
