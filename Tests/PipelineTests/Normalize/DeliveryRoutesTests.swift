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
