import Testing
@testable import Pipeline

/// `SourceKey`'s own hash (`_rawHashValue(seed:)`, not SipHash) against the keys' identity.
@Suite("Source keys")
struct SourceKeyTests {
    @Test("a table keyed by source keys finds every key of several incarnations and partitions, and only those; the keys' hashes spread")
    func table() {
        let incarnations = [SourceKey.incarnation(topic: "hits", epoch: 0), SourceKey.incarnation(topic: "hits", epoch: 1), SourceKey.incarnation(topic: "other", epoch: 0)]
        let keys = incarnations.flatMap { incarnation in (0..<64).map { SourceKey(incarnation: incarnation, partition: Int32($0)) } }
        var table: [SourceKey: Int] = [:]
        for (index, key) in keys.enumerated() { table[key] = index }
        #expect(table.count == keys.count)
        #expect(keys.enumerated().allSatisfy { table[$1] == $0 })
        #expect(table[SourceKey(incarnation: incarnations[0], partition: 64)] == nil)
        #expect(table[SourceKey(incarnation: incarnations[0] &+ 1, partition: 0)] == nil)
        // The low bits pick a table's bucket: 192 keys over 256 buckets leave few alone.
        let buckets = Set(keys.map { $0._rawHashValue(seed: 0) & 255 })
        #expect(buckets.count > 100, "\(buckets.count) buckets of 256 for \(keys.count) keys")
        #expect(Set(keys.map { $0._rawHashValue(seed: 0) }).count == keys.count)
    }
}
