import HitGenerator
import Testing
@testable import Windowing

/// The broadlog table against a dictionary doing the same work.
@Suite("Broadlog set")
struct BroadlogSetTests {
    @Test("merges give the previous actions, and the table holds what a dictionary holds, over ids of every length and alphabet")
    func agreesWithADictionary() {
        var rng = SplitMix64(seed: 0xB0AD_1065)
        let alphabet = Array("0123456789abcdefh-_é€😀\u{0}".unicodeScalars)
        var ids: [String] = ["", "a", "a\u{0}", "h1685a5", "h1685a5x", "0123456789abcdef", "0123456789abcdefg"]
        for _ in 0..<3_000 {
            let length = Int.random(in: 1...40, using: &rng)
            ids.append(String(String.UnicodeScalarView((0..<length).map { _ in alphabet.randomElement(using: &rng)! })))
        }
        var set = BroadlogSet()
        var reference: [String: UInt8] = [:]
        for _ in 0..<40_000 {
            let id = ids.randomElement(using: &rng)!
            let bit: UInt8 = [1, 2, 4].randomElement(using: &rng)!
            let before = reference[id, default: 0]
            reference[id] = before | bit
            #expect(set.merge(id, bit) == before, "\(id)")
        }
        #expect(set.count == reference.count)
        var seen: [String: UInt8] = [:]
        set.forEach { seen[$0] = $1 }
        #expect(seen == reference)
        for id in ids { #expect(set.actions(of: id) == reference[id, default: 0]) }
        #expect(set.actions(of: "never-seen") == 0)
    }

    @Test("equal sets compare equal whatever their insertion order and capacity")
    func equality() {
        let pairs: [(String, UInt8)] = (0..<100).map { ("b\($0)", UInt8(1 << ($0 % 3))) }
        var forward = BroadlogSet()
        for (id, bits) in pairs { _ = forward.merge(id, bits) }
        var backward = BroadlogSet(minimumCapacity: 1_000)
        for (id, bits) in pairs.reversed() { _ = backward.merge(id, bits) }
        #expect(forward == backward)
        _ = backward.merge("b0", 4)
        #expect(forward != backward)
    }
}
