import HitGenerator
import Testing
import TrackingDomain
@testable import Windowing

/// The broadlog table against a dictionary doing the same work.
@Suite("Broadlog set")
struct BroadlogSetTests {
    @Test("merges give the previous actions, and the table holds what a dictionary holds, over ids of every length and alphabet")
    func agreesWithADictionary() {
        var rng = SplitMix64(seed: 0xB0AD_1065)
        let alphabet = Array("0123456789abcdefh-_é€😀\u{0}".unicodeScalars)
        var ids: [BroadlogID] = ["", "a", "a\u{0}", "h1685a5", "h1685a5x", "0123456789abcde", "0123456789abcdef", "0123456789abcdefg"]
        for _ in 0..<3_000 {
            let length = Int.random(in: 1...40, using: &rng)
            ids.append(BroadlogID(String(String.UnicodeScalarView((0..<length).map { _ in alphabet.randomElement(using: &rng)! }))))
        }
        var set = BroadlogSet()
        var reference: [BroadlogID: UInt8] = [:]
        for _ in 0..<40_000 {
            let id = ids.randomElement(using: &rng)!
            let bit: UInt8 = [1, 2, 4].randomElement(using: &rng)!
            let before = reference[id, default: 0]
            reference[id] = before | bit
            #expect(set.merge(id, bit) == before, "\(id)")
        }
        #expect(set.count == reference.count)
        var seen: [BroadlogID: UInt8] = [:]
        set.forEach { seen[$0] = $1 }
        #expect(seen == reference)
        for id in ids { #expect(set.actions(of: id) == reference[id, default: 0]) }
        #expect(set.actions(of: "never-seen") == 0)
    }

    @Test("equal sets compare equal whatever their insertion order and capacity")
    func equality() {
        let pairs: [(BroadlogID, UInt8)] = (0..<100).map { (BroadlogID("b\($0)"), UInt8(1 << ($0 % 3))) }
        var forward = BroadlogSet()
        for (id, bits) in pairs { _ = forward.merge(id, bits) }
        var backward = BroadlogSet(minimumCapacity: 1_000)
        for (id, bits) in pairs.reversed() { _ = backward.merge(id, bits) }
        #expect(forward == backward)
        _ = backward.merge("b0", 4)
        #expect(forward != backward)
    }

    @Test("a tracking table flags exactly the broadlogs added or given a new action since the last clear: while few, past the slots it notes, across growth, and for long ids", arguments: [40, 400, 4_000])
    func tracksWhatChanged(changesBetweenClears: Int) {
        var rng = SplitMix64(seed: UInt64(changesBetweenClears))
        let ids = (0..<3_000).map { index in BroadlogID(index % 97 == 0 ? "long-broadlog-id-\(index)-0123456789" : "b\(index)") }
        var set = BroadlogSet()
        var actions: [BroadlogID: UInt8] = [:]
        var changed: [BroadlogID: UInt8] = [:]
        for step in 1...20_000 {
            let id = ids.randomElement(using: &rng)!
            let bit: UInt8 = [1, 2, 4].randomElement(using: &rng)!
            let before = actions[id, default: 0]
            #expect(set.merge(id, bit, tracking: true) == before)
            if before | bit != before {
                actions[id] = before | bit
                changed[id] = before | bit
            }
            if step % changesBetweenClears == 0 {
                var flagged: [BroadlogID: UInt8] = [:]
                set.forEachChanged { id, actions in
                    #expect(flagged[id] == nil, "\(id) handed out twice")
                    flagged[id] = actions
                }
                #expect(flagged == changed, "step \(step)")
                #expect(set.hasChanges == !changed.isEmpty)
                set.clearChanges()
                changed = [:]
            }
        }
        var all: [BroadlogID: UInt8] = [:]
        set.forEach { all[$0] = $1 }
        #expect(all == actions, "the flags never show through the actions")
    }

    @Test("a table that does not track flags nothing")
    func untrackedTablesFlagNothing() {
        var set = BroadlogSet()
        for index in 0..<1_000 { _ = set.merge(BroadlogID("b\(index)"), 1) }
        _ = set.merge("a-long-broadlog-id-of-many-bytes", 2)
        var flagged = 0
        set.forEachChanged { _, _ in flagged += 1 }
        #expect(flagged == 0 && !set.hasChanges)
    }
}
