@testable import Pipeline
import Testing
import TrackingDomain
import Windowing

/// A lane's table of delivery routes hands back exactly the partition `DeliveryHash.partition`
/// gives, for any id: whatever its length, inline or spilled, ASCII or not, ids alike in their
/// first sixteen bytes or only told apart by trailing NULs, and after the table starts afresh.
@Suite("Delivery routes")
struct DeliveryRoutesTests {
    /// Ids of every length from 0 to 40, in ASCII and with a byte outside it at each place,
    /// ids sharing their first sixteen bytes, and ids differing only by trailing NUL bytes.
    static func ids() -> [DeliveryID] {
        var ids: [DeliveryID] = []
        for length in 0...40 {
            let ascii = (0..<length).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) }
            ids.append(DeliveryID(String(ascii)))
            for place in stride(from: 0, to: length, by: 3) {
                var other = ascii
                other[place] = "é"
                ids.append(DeliveryID(String(other)))
            }
            ids.append(DeliveryID(String(ascii) + "\u{0}"))
            ids.append(DeliveryID("0123456789abcdef" + String(ascii)))
        }
        return ids
    }

    @Test("every id is routed to DeliveryHash.partition, seen once or again, for every partition count", arguments: [1, 4, 7, 64] as [Int32])
    func sameAsTheHash(partitions: Int32) {
        var routes = DeliveryRoutes()
        let ids = Self.ids()
        #expect(Set(ids).count == ids.count)
        for round in 0..<3 {
            for id in ids {
                let slot = routes.slot(of: id, partitions: partitions)
                #expect(routes.routes[slot].id == id, "round \(round)")
                #expect(routes.routes[slot].partition == DeliveryHash.partition(of: id, count: partitions), "\(id), round \(round)")
            }
        }
    }

    @Test("more deliveries than the table holds: it starts afresh, and every id keeps its partition; a changed partition count takes each anew")
    func startsAfresh() {
        var routes = DeliveryRoutes()
        let ids = (0..<(3 * DeliveryRoutes.maxRoutes)).map { DeliveryID(String($0, radix: 16)) }
        for id in ids + ids.reversed() {
            let slot = routes.slot(of: id, partitions: 16)
            #expect(routes.routes[slot].id == id && routes.routes[slot].partition == DeliveryHash.partition(of: id, count: 16))
        }
        for id in ids.prefix(100) {
            let slot = routes.slot(of: id, partitions: 5)
            #expect(routes.routes[slot].partition == DeliveryHash.partition(of: id, count: 5))
        }
    }

    /// The longest run of occupied slots, which a lookup of an absent id may have to search.
    static func longestRun(_ routes: DeliveryRoutes) -> Int {
        var longest = 0
        var run = 0
        for route in routes.routes + routes.routes {  // twice round: a run may wrap
            run = route.partition >= 0 ? run + 1 : 0
            longest = max(longest, run)
        }
        return min(longest, routes.routes.count)
    }

    /// The inverse of an odd number modulo 2^64 (Newton's iteration): ids whose first word is a
    /// small number times the inverse of a multiplier all multiply to small numbers.
    static func inverse(_ odd: UInt64) -> UInt64 {
        var inverse = odd
        for _ in 0..<5 { inverse = inverse &* (2 &- odd &* inverse) }
        return inverse
    }

    @Test(
        "ids an adversary picks to fall together (sharing their first sixteen bytes; or made to multiply to small numbers, as against an unkeyed multiply-shift of their words) spread over the table: no run of slots a lookup searches grows with them",
        arguments: [
            (0..<1_500).map { DeliveryID("0123456789abcdef" + String($0)) },
            (0..<1_500).map { DeliveryID(bytes: InlineUTF8(low: UInt64($0) &* inverse(0x9E37_79B9_7F4A_7C15), high: 0, utf8Count: 8)) },
        ])
    func adversarialIdsSpread(ids: [DeliveryID]) {
        var routes = DeliveryRoutes()
        for id in ids { _ = routes.slot(of: id, partitions: 16) }
        #expect(routes.routes.count(where: { $0.partition >= 0 }) == ids.count)
        // 1,500 keys in 4,096 slots hashed at random leave runs of a few dozen at most; ids
        // that collide make one run of them all.
        #expect(Self.longestRun(routes) < 100)
    }

    @Test("a number remembered for a record stays with its delivery's slot until it is remembered again")
    func remembersNumbers() {
        var routes = DeliveryRoutes()
        let ids = Self.ids()
        for (index, id) in ids.enumerated() {
            routes.remember(index, record: 7, at: routes.slot(of: id, partitions: 4))
        }
        for (index, id) in ids.enumerated() {
            let slot = routes.slot(of: id, partitions: 4)
            #expect(routes.routes[slot].number == Int32(index) && routes.routes[slot].record == 7)
        }
    }
}
