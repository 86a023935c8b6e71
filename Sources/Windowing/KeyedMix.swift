import TrackingDomain

/// The hash of the engine's own tables of ids (`BroadlogSet`, and a window slot's deliveries
/// through `DeliveryKey`), of the normalize lanes' table of delivery routes, and of the
/// aggregate stage's tables of sources (`SourceKey`): a multiply-and-fold mix of two words,
/// keyed by a secret drawn at random when the process starts.
///
/// Why: ids come from devices, and a table they fill must not let anyone choose ids that
/// collide, which the secret keeps them from computing; Swift's SipHash gives the same
/// protection at several times the cost (its `Hasher` was about half of each delivery lookup:
/// callgrind, `WindowEngine.process`).
package enum KeyedMix {
    /// The secret key, drawn once per process.
    package static let secret: (UInt64, UInt64) = {
        var generator = SystemRandomNumberGenerator()
        return (generator.next() | 1, generator.next() | 1)
    }()

    /// Folds the 128-bit product of two words: the mixing step of wyhash-style hashes.
    @inline(__always)
    static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }

    /// Two words mixed under the secret (and `seed`, a table's own, where it has one). A loop
    /// passes the secret it read once: each read of it is a call (`swift_once`).
    @inline(__always)
    package static func hash(_ low: UInt64, _ high: UInt64, seed: UInt64 = 0, secret: (UInt64, UInt64) = secret) -> UInt64 {
        let (k0, k1) = secret
        return fold(fold(low ^ k0 ^ seed, high ^ k1) ^ k0, k1 ^ 0xA076_1D64_78BD_642F)
    }

    /// An id mixed under the secret: one of up to 15 bytes is its two words with its length in
    /// the top byte (zero there for such an id), mixed once; a longer one, rare, goes through
    /// `Hasher`, since its words alone would let ids that share their first sixteen bytes collide
    /// whatever the secret.
    @inline(__always)
    package static func hash(_ id: InlineUTF8, seed: UInt64 = 0, secret: (UInt64, UInt64) = secret) -> UInt64 {
        guard id.utf8Count <= 15 else {
            var hasher = Hasher()
            hasher.combine(seed)
            id.hash(into: &hasher)
            return UInt64(truncatingIfNeeded: hasher.finalize())
        }
        return hash(id.low, id.high | UInt64(truncatingIfNeeded: id.utf8Count) << 56, seed: seed, secret: secret)
    }
}

/// A delivery's id as the key of a window slot's table (`WindowSlot.deliveries`), hashed with
/// `KeyedMix` rather than SipHash: every hit counted looks its delivery up there.
///
/// Measured (callgrind, one stage, 200,000 live hits): the lookup cost 245 instructions with
/// the id's own hashing, most of them `Hasher`'s, and costs 97 with this one.
struct DeliveryKey: Hashable, Sendable {
    let id: DeliveryID

    @inline(__always)
    init(_ id: DeliveryID) { self.id = id }

    static func == (a: DeliveryKey, b: DeliveryKey) -> Bool { a.id == b.id }

    /// As the id hashes, for a hasher that combines it with more.
    func hash(into hasher: inout Hasher) { id.hash(into: &hasher) }

    /// What `Dictionary` asks for: the id mixed by `KeyedMix`.
    @inline(__always)
    func _rawHashValue(seed: Int) -> Int {
        Int(truncatingIfNeeded: KeyedMix.hash(id.bytes, seed: UInt64(truncatingIfNeeded: seed)))
    }
}
