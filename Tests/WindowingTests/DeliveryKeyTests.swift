import HitGenerator
import Testing
import TrackingDomain
@testable import Windowing

/// A slot's table keyed by `DeliveryKey` (its own hash, not SipHash) against one keyed by the id.
@Suite("Delivery key")
struct DeliveryKeyTests {
    @Test("a table keyed by it holds what a table keyed by the id holds, over ids of every length, those around 15 and 16 bytes and those told apart by a trailing NUL included")
    func agreesWithTheIdsTable() {
        var rng = SplitMix64(seed: 0xDE11_7E5)
        let alphabet = Array("0123456789abcdef-é😀\u{0}".unicodeScalars)
        var ids: [DeliveryID] = [
            "", "\u{0}", "a", "a\u{0}", "a\u{0}\u{0}", "1476005", "0123456789abcd", "0123456789abcde", "0123456789abcde\u{0}",
            "0123456789abcdef", "0123456789abcdefg", "0123456789abcdef\u{0}",
        ]
        for _ in 0..<2_000 {
            let length = Int.random(in: 0...24, using: &rng)
            ids.append(DeliveryID(String(String.UnicodeScalarView((0..<length).map { _ in alphabet.randomElement(using: &rng)! }))))
        }
        var keyed: [DeliveryKey: Int] = [:]
        var reference: [DeliveryID: Int] = [:]
        for (index, id) in ids.enumerated() {
            keyed[DeliveryKey(id), default: 0] += index
            reference[id, default: 0] += index
        }
        #expect(keyed.count == reference.count)
        for (id, sum) in reference { #expect(keyed[DeliveryKey(id)] == sum) }
        for id in ids { #expect(DeliveryKey(id).hashValue == DeliveryKey(id).hashValue) }
    }
}
