import TrackingDomain

/// The broadlogs of one delivery in one window, each with the actions it has shown (a bitmask,
/// never zero for a broadlog present): an open-addressing table of its own rather than a
/// `Dictionary<String, UInt8>`.
///
/// Why: counting a hit looks one broadlog up, and with a dictionary per (window, delivery) that
/// cost a third of the engine's time, in Swift's SipHash, in its uniqueness checks and in
/// growing (measured with `trackpipe-bench windowing`, docs/performance.md). Ids are short
/// (`h1685a5`): an id of up to 15 UTF-8 bytes is kept inline in a 16-byte entry with its length
/// and actions, so the table holds plain words (no reference counting, growing is a copy, a
/// retained broadlog costs about 21 bytes); longer ids, which no SDK sends, go to a dictionary
/// beside it. An id is hashed with a multiply-and-fold mix of its bytes keyed by a secret drawn
/// at random when the process starts: ids come from devices, and a table they fill must not
/// let anyone choose ids that collide, which the secret keeps them from computing. Linear
/// probing, at most three quarters full.
///
/// A table that tracks changes (`merge(_:_:tracking:)`, a window task's, whose changelog writes
/// what changed since its last write) flags each broadlog added or given a new action, in the
/// entry's last free bit, until `clearChanges`; it also notes where the flagged entries are while
/// they are few (4 bytes each, at most one for every eight slots), so that handing them out costs
/// what changed, not the whole table. Past that many, handing them out scans the table, which
/// then costs no more than eight times what changed.
struct BroadlogSet: Sendable {
    /// An id's bytes in two little-endian words, the last byte holding the length (low nibble),
    /// the actions (bits 4 to 6) and whether the entry changed since `clearChanges` (bit 7). All
    /// zero is an empty slot: a present entry has at least one action.
    private struct Entry: Sendable, Equatable {
        var low: UInt64
        var high: UInt64

        static let empty = Entry(low: 0, high: 0)
        static let changedBit: UInt64 = 1 << 63
        static let actionsShift: UInt64 = 60
        static let actionsMask: UInt64 = 0x7 << actionsShift
        static let tagMask: UInt64 = 0xFF << 56

        var isEmpty: Bool { high == 0 }
        var actions: UInt8 { UInt8(truncatingIfNeeded: (high >> Self.actionsShift) & 0x7) }
        var changed: Bool { high & Self.changedBit != 0 }
        /// The id's words without the actions and the flag (what identifies it).
        var key: Entry { Entry(low: low, high: high & ~(Self.actionsMask | Self.changedBit)) }
        func with(actions: UInt8, changed: Bool) -> Entry {
            Entry(
                low: low,
                high: (high & ~(Self.actionsMask | Self.changedBit)) | (UInt64(actions & 0x7) << Self.actionsShift)
                    | (changed ? Self.changedBit : 0))
        }

        /// The id, its words as they are: no bytes copied, nothing decoded.
        var id: BroadlogID {
            BroadlogID(low: low, high: high & ~Self.tagMask, utf8Count: Int(truncatingIfNeeded: (high >> 56) & 0xF))
        }
    }

    /// A long id's actions carry its changed flag in their top bit.
    private static let longChangedBit: UInt8 = 0x80

    // 28 bytes in all, so that a window's own small fields fill the rest of the last word
    // (`DeliveryWindow`): a window of a few broadlogs costs what it did before changes were kept.
    private var entries: [Entry] = []
    /// Ids longer than 15 bytes (their changed flag in the top bit of their actions).
    private var long: [BroadlogID: UInt8] = [:]
    /// Where the entries flagged changed are, while they are few; nil once they were too many
    /// (handing them out then scans the table).
    private var changedSlots: [UInt32]? = []
    /// Entries in `entries`.
    private var inline: UInt32 = 0

    init() {}

    init(minimumCapacity: Int) {
        if minimumCapacity > 0 { entries = Array(repeating: .empty, count: Self.capacity(for: minimumCapacity)) }
    }

    var count: Int { Int(inline) + long.count }

    /// Adds `bits` to the actions of `id` (adding the id if new); returns its actions before.
    /// With `tracking`, an id added or given a new action is flagged changed.
    @inline(__always)
    mutating func merge(_ id: BroadlogID, _ bits: UInt8, tracking: Bool = false) -> UInt8 {
        guard let key = Self.inlineKey(id) else { return mergeLong(id, bits, tracking: tracking) }
        return merge(key: key, bits, tracking: tracking)
    }

    @inline(__always)
    private mutating func merge(key: Entry, _ bits: UInt8, tracking: Bool) -> UInt8 {
        if (Int(inline) + 1) * 4 > entries.count * 3 { grow() }
        let mask = entries.count &- 1
        var slot = Int(truncatingIfNeeded: Self.hash(key)) & mask
        let (before, added, flagged) = entries.withUnsafeMutableBufferPointer { table -> (UInt8, Bool, Bool) in
            while true {
                let entry = table[slot]
                if entry.isEmpty {
                    table[slot] = key.with(actions: bits, changed: tracking)
                    return (0, true, tracking)
                }
                if entry.key == key {
                    let actions = entry.actions
                    let after = actions | bits
                    if after == actions { return (actions, false, false) }
                    table[slot] = entry.with(actions: after, changed: tracking || entry.changed)
                    return (actions, false, tracking && !entry.changed)
                }
                slot = (slot &+ 1) & mask
            }
        }
        if added { inline += 1 }
        if flagged { noteChanged(slot: slot) }
        return before
    }

    private mutating func mergeLong(_ id: BroadlogID, _ bits: UInt8, tracking: Bool) -> UInt8 {
        let stored = long[id, default: 0]
        let before = stored & ~Self.longChangedBit
        let after = before | bits
        guard after != before else { return before }
        long[id] = after | (tracking || stored & Self.longChangedBit != 0 ? Self.longChangedBit : 0)
        return before
    }

    /// The list is taken out to grow and put back: appended through the optional in place
    /// (`changedSlots!.append`), each append went through two of `Array`'s calls, 90
    /// instructions (callgrind, one stage).
    @inline(__always)
    private mutating func noteChanged(slot: Int) {
        guard var list = changedSlots.take() else { return }
        guard list.count < max(64, entries.count / 8) else { return }
        list.append(UInt32(truncatingIfNeeded: slot))
        changedSlots = list
    }

    /// The actions of `id`; 0 if absent.
    func actions(of id: BroadlogID) -> UInt8 {
        guard let key = Self.inlineKey(id) else { return long[id, default: 0] & ~Self.longChangedBit }
        guard !entries.isEmpty else { return 0 }
        let mask = entries.count &- 1
        var slot = Int(truncatingIfNeeded: Self.hash(key)) & mask
        while !entries[slot].isEmpty {
            if entries[slot].key == key { return entries[slot].actions }
            slot = (slot &+ 1) & mask
        }
        return 0
    }

    /// Every broadlog and its actions, in no particular order.
    func forEach(_ body: (BroadlogID, UInt8) -> Void) {
        for entry in entries where !entry.isEmpty { body(entry.id, entry.actions) }
        for (id, actions) in long { body(id, actions & ~Self.longChangedBit) }
    }

    // MARK: Changes

    /// Every broadlog flagged changed since the last `clearChanges`, with all its actions, in no
    /// particular order.
    func forEachChanged(_ body: (BroadlogID, UInt8) -> Void) {
        if let changedSlots {
            for slot in changedSlots { body(entries[Int(slot)].id, entries[Int(slot)].actions) }
        } else {
            for entry in entries where entry.changed { body(entry.id, entry.actions) }
        }
        for (id, stored) in long where stored & Self.longChangedBit != 0 { body(id, stored & ~Self.longChangedBit) }
    }

    /// Room for what `forEachChanged` hands out: the changed entries noted, or once they were
    /// too many to note (over an eighth of the table) every entry, plus the long ids.
    var changedBound: Int { (changedSlots?.count ?? Int(inline)) + long.count }

    /// Whether any broadlog is flagged changed.
    var hasChanges: Bool {
        changedSlots.map { !$0.isEmpty } ?? entries.contains(where: \.changed) || long.values.contains { $0 & Self.longChangedBit != 0 }
    }

    /// Forgets which broadlogs changed: they have been handed out.
    mutating func clearChanges() {
        if let changedSlots {
            entries.withUnsafeMutableBufferPointer { table in
                for slot in changedSlots { table[Int(slot)].high &= ~Entry.changedBit }
            }
        } else {
            entries.withUnsafeMutableBufferPointer { table in
                for index in table.indices where table[index].changed { table[index].high &= ~Entry.changedBit }
            }
        }
        // Kept, not made anew: a window changes again after most writes, and growing the list
        // back from nothing cost 47 instructions a hit (callgrind, one stage).
        var list = changedSlots.take() ?? []
        list.removeAll(keepingCapacity: true)
        changedSlots = list
        for (id, stored) in long where stored & Self.longChangedBit != 0 { long[id] = stored & ~Self.longChangedBit }
    }

    /// Twice the slots; every entry keeps its actions and its flag, and the flagged ones are
    /// noted again where they now are.
    ///
    /// The flagged ones go back into the list they were in (as many as before, so it has the
    /// room), and the secret is read once: made anew and read per entry, a grow cost 2,900
    /// instructions, 115 a hit (callgrind, one stage).
    private mutating func grow() {
        let old = entries
        entries = Array(repeating: .empty, count: max(8, old.count * 2))
        var flagged = changedSlots.take()
        flagged?.removeAll(keepingCapacity: true)
        let mask = entries.count &- 1
        let secret = KeyedMix.secret
        entries.withUnsafeMutableBufferPointer { table in
            for entry in old where !entry.isEmpty {
                var slot = Int(truncatingIfNeeded: Self.hash(entry.key, secret: secret)) & mask
                while !table[slot].isEmpty { slot = (slot &+ 1) & mask }
                table[slot] = entry
                if entry.changed { flagged?.append(UInt32(truncatingIfNeeded: slot)) }
            }
        }
        changedSlots = flagged
    }

    /// A power of two holding `count` entries at most three quarters full.
    private static func capacity(for count: Int) -> Int {
        var capacity = 8
        while count * 4 > capacity * 3 { capacity *= 2 }
        return capacity
    }

    /// The entry of an id of at most 15 bytes (without actions: not a present entry yet); nil
    /// for a longer one.
    @inline(__always)
    private static func inlineKey(_ id: BroadlogID) -> Entry? {
        // An id of at most 15 bytes leaves the top byte of its high word zero: the length goes
        // there.
        guard id.utf8Count <= 15 else { return nil }
        return Entry(low: id.bytes.low, high: id.bytes.high | (UInt64(id.utf8Count) << 56))
    }

    // MARK: Hashing

    @inline(__always)
    private static func hash(_ key: Entry, secret: (UInt64, UInt64) = KeyedMix.secret) -> UInt64 {
        KeyedMix.hash(key.low, key.high, secret: secret)
    }
}

extension BroadlogSet: Equatable {
    /// Same broadlogs with the same actions, whatever the table's layout.
    static func == (a: BroadlogSet, b: BroadlogSet) -> Bool {
        guard a.count == b.count else { return false }
        var same = true
        a.forEach { id, actions in if same && b.actions(of: id) != actions { same = false } }
        return same
    }
}

extension BroadlogSet: ExpressibleByDictionaryLiteral {
    init(dictionaryLiteral elements: (BroadlogID, UInt8)...) {
        self.init(minimumCapacity: elements.count)
        for (id, actions) in elements where actions != 0 { _ = merge(id, actions) }
    }
}
