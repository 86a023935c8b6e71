import TrackingDomain
import Windowing

/// A lane's memory of the deliveries it has routed, from batch to batch: each delivery's
/// repartition partition (`DeliveryHash.partition`, taken once per delivery) and its number in
/// the record that last took one of its events, so that a delivery seen before costs a probe of
/// this table rather than the FNV-1a loop over its bytes and a search of the record's delivery
/// table, each hit (about 60 and 55 instructions, callgrind).
///
/// Open addressing with linear probing, keyed by `KeyedMix` (ids come from devices: an unkeyed
/// mix would let anyone send deliveries whose ids fall into one run of slots, a search of up to
/// the whole table every hit) and checked by full equality; emptied when half full, so that it
/// stays small whatever the number of deliveries.
struct DeliveryRoutes {
    /// One delivery's route.
    struct Route {
        var id: DeliveryID
        /// The delivery's repartition partition; -1: an empty slot.
        var partition: Int32
        /// The delivery's number in the record stamped `record`.
        var number: Int32
        /// The stamp of the record that gave `number` (`PreparedLane.begun`); -1: none.
        var record: Int
    }

    static let slotBits = 12
    /// At most this many deliveries are remembered before the table starts afresh.
    static let maxRoutes = 1 << (slotBits - 1)
    private static let empty = Route(id: DeliveryID(bytes: InlineUTF8(low: 0, high: 0, utf8Count: 0)), partition: -1, number: 0, record: -1)

    private(set) var routes: [Route] = []
    /// `KeyedMix.secret`, read once: each read of it is a call.
    private let secret = KeyedMix.secret
    private var used = 0
    /// The partition count the routes were taken for.
    private var partitions: Int32 = -1

    /// The slot of `id`'s route, taken for `partitions` partitions if the table has none.
    @inline(__always)
    mutating func slot(of id: DeliveryID, partitions: Int32) -> Int {
        if partitions != self.partitions || used >= Self.maxRoutes { restart(partitions: partitions) }
        let mask = (1 << Self.slotBits) - 1
        var slot = Int(truncatingIfNeeded: KeyedMix.hash(id.bytes, secret: secret)) & mask
        while true {
            let partition = routes[slot].partition
            if partition < 0 { return add(id, at: slot) }
            if routes[slot].id == id { return slot }
            slot = (slot + 1) & mask
        }
    }

    /// Remembers `number` as the delivery's number in the record stamped `record`.
    @inline(__always)
    mutating func remember(_ number: Int, record: Int, at slot: Int) {
        routes[slot].number = Int32(truncatingIfNeeded: number)
        routes[slot].record = record
    }

    private mutating func add(_ id: DeliveryID, at slot: Int) -> Int {
        routes[slot] = Route(id: id, partition: DeliveryHash.partition(of: id, count: partitions), number: 0, record: -1)
        used += 1
        return slot
    }

    private mutating func restart(partitions: Int32) {
        self.partitions = partitions
        used = 0
        if routes.isEmpty {
            routes = Array(repeating: Self.empty, count: 1 << Self.slotBits)
        } else {
            for index in routes.indices { routes[index] = Self.empty }
        }
    }
}
