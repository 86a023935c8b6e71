import Testing
import TrackingDomain
@testable import Windowing

@Suite struct DeliveryHashTests {
    @Test func matchesPublishedFNV1aVectors() {
        #expect(DeliveryHash.fnv1a("") == 0xcbf2_9ce4_8422_2325)
        #expect(DeliveryHash.fnv1a("a") == 0xaf63_dc4c_8601_ec8c)
        #expect(DeliveryHash.fnv1a("foobar") == 0x8594_4171_f739_67e8)
    }

    @Test func spreadsDeliveriesOverShards() {
        var perShard = [Int](repeating: 0, count: 8)
        for index in 0..<4_000 {
            perShard[DeliveryHash.shard(of: DeliveryID(String(index, radix: 16)), count: 8)] += 1
        }
        #expect(perShard.allSatisfy { $0 > 350 && $0 < 650 })
    }
}
