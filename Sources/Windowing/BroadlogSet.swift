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
struct BroadlogSet: Sendable {
    /// An id's bytes in two little-endian words, the last byte holding the length (low nibble)
    /// and the actions (bits 4 to 6), with the top bit set: all zero is an empty slot.
    private struct Entry: Sendable, Equatable {
        var low: UInt64
        var high: UInt64

        static let empty = Entry(low: 0, high: 0)
        static let occupied: UInt64 = 1 << 63
        static let actionsShift: UInt64 = 60
        static let tagMask: UInt64 = 0xFF << 56

        var isEmpty: Bool { high == 0 }
        var actions: UInt8 { UInt8(truncatingIfNeeded: (high >> Self.actionsShift) & 0x7) }
        /// The id's words without the actions (what identifies it).
        var key: Entry { Entry(low: low, high: high & ~(0x7 << Self.actionsShift)) }
        func with(actions: UInt8) -> Entry {
            Entry(low: low, high: (high & ~(0x7 << Self.actionsShift)) | (UInt64(actions & 0x7) << Self.actionsShift))
        }

        var id: String {
            let length = Int(truncatingIfNeeded: (high >> 56) & 0xF)
            return withUnsafeBytes(of: (low.littleEndian, (high & ~Self.tagMask).littleEndian)) { raw in
                String(decoding: UnsafeRawBufferPointer(rebasing: raw[0..<length]), as: UTF8.self)
            }
        }
    }

    private var entries: [Entry] = []
    /// Ids longer than 15 bytes.
    private var long: [String: UInt8] = [:]
    private var inline = 0

    init() {}

    init(minimumCapacity: Int) {
        if minimumCapacity > 0 { entries = Array(repeating: .empty, count: Self.capacity(for: minimumCapacity)) }
    }

    var count: Int { inline + long.count }
    var isEmpty: Bool { count == 0 }

    /// Adds `bits` to the actions of `id` (adding the id if new); returns its actions before.
    @inline(__always)
    mutating func merge(_ id: String, _ bits: UInt8) -> UInt8 {
        guard let key = Self.inlineKey(id) else {
            let before = long[id, default: 0]
            long[id] = before | bits
            return before
        }
        return merge(key: key, bits)
    }

    @inline(__always)
    private mutating func merge(key: Entry, _ bits: UInt8) -> UInt8 {
        if (inline + 1) * 4 > entries.count * 3 { grow() }
        let mask = entries.count &- 1
        var slot = Int(truncatingIfNeeded: Self.hash(key)) & mask
        let (before, added) = entries.withUnsafeMutableBufferPointer { table -> (UInt8, Bool) in
            while true {
                let entry = table[slot]
                if entry.isEmpty {
                    table[slot] = key.with(actions: bits)
                    return (0, true)
                }
                if entry.key == key {
                    let actions = entry.actions
                    table[slot] = entry.with(actions: actions | bits)
                    return (actions, false)
                }
                slot = (slot &+ 1) & mask
            }
        }
        if added { inline += 1 }
        return before
    }

    /// The actions of `id`; 0 if absent.
    func actions(of id: String) -> UInt8 {
        guard let key = Self.inlineKey(id) else { return long[id, default: 0] }
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
    func forEach(_ body: (String, UInt8) -> Void) {
        for entry in entries where !entry.isEmpty { body(entry.id, entry.actions) }
        for (id, actions) in long { body(id, actions) }
    }

    private mutating func grow() {
        let old = entries
        entries = Array(repeating: .empty, count: max(8, old.count * 2))
        inline = 0
        for entry in old where !entry.isEmpty { _ = merge(key: entry.key, entry.actions) }
    }

    /// A power of two holding `count` entries at most three quarters full.
    private static func capacity(for count: Int) -> Int {
        var capacity = 8
        while count * 4 > capacity * 3 { capacity *= 2 }
        return capacity
    }

    /// The entry of an id of at most 15 bytes (without actions); nil for a longer one.
    @inline(__always)
    private static func inlineKey(_ id: String) -> Entry? {
        var id = id
        return id.withUTF8 { utf8 -> Entry? in
            guard utf8.count <= 15 else { return nil }
            var words: (UInt64, UInt64) = (0, 0)
            withUnsafeMutableBytes(of: &words) { raw in
                if let base = utf8.baseAddress { raw.baseAddress!.copyMemory(from: base, byteCount: utf8.count) }
            }
            return Entry(low: UInt64(littleEndian: words.0), high: UInt64(littleEndian: words.1) | Entry.occupied | (UInt64(utf8.count) << 56))
        }
    }

    // MARK: Hashing

    /// The secret key of the hash, drawn once per process.
    private static let secret: (UInt64, UInt64) = {
        var generator = SystemRandomNumberGenerator()
        return (generator.next() | 1, generator.next() | 1)
    }()

    /// Folds the 128-bit product of two words: the mixing step of wyhash-style hashes.
    @inline(__always)
    private static func fold(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let product = a.multipliedFullWidth(by: b)
        return product.high ^ product.low
    }

    @inline(__always)
    private static func hash(_ key: Entry) -> UInt64 {
        let (k0, k1) = secret
        return fold(fold(key.low ^ k0, key.high ^ k1) ^ k0, k1 ^ 0xA076_1D64_78BD_642F)
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
    init(dictionaryLiteral elements: (String, UInt8)...) {
        self.init(minimumCapacity: elements.count)
        for (id, actions) in elements where actions != 0 { _ = merge(id, actions) }
    }
}
