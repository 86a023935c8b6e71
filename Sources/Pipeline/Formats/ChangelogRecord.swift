import Windowing

/// The format of a window task's changelog: one compacted topic partition per task, holding
/// the latest state of every window the task retains, so that a new owner reads the state back
/// instead of re-reading the input for `--retention`.
///
/// Keys say what a record is; compaction keeps the latest value per key, and a deleted
/// (evicted) window's keys get tombstones (null values):
/// - `W` window start (Int64, big-endian) delivery id (UInt16 length, bytes): a window's head:
///   its counters, how far into the input it has counted, the revision last emitted, and its
///   broadlogs when they fit in one record;
/// - `C` window start, delivery id, chunk set (UInt8), chunk index (UInt16): the broadlogs of a
///   window too large for one record (brokers refuse records over 1 MB). A large window's
///   chunks alternate between two sets, and its head, written after them, names the set: a
///   crash in the middle of writing one set leaves the head pointing at the other, complete one;
/// - `T`: the task's own state as of the write: how far it had processed its input, the
///   eviction horizon, where its line of owners began writing the partition, and the group it
///   counts for (so that a run of another group is refused before it writes here).
///
/// Values start with a format version byte, `version`, the one version this trackpipe writes
/// and reads: a record of any other is refused, not guessed at (a restore skips it as
/// unreadable). A release that changes the format reads the previous one for one release, then
/// drops it (docs/scale-out.md, "Formats").
public enum ChangelogRecord {
    public static let version: UInt8 = 2
    /// Broadlog bytes a head carries itself; beyond, they go to chunks of at most this size.
    public static let chunkBytes = 512 * 1024

    enum Tag: UInt8 {
        case head = 0x57  // W
        case chunk = 0x43  // C
        case task = 0x54  // T
    }

    /// The task record's key.
    public static let taskKey: [UInt8] = [Tag.task.rawValue]

    /// What the task record says.
    public struct TaskState: Sendable, Equatable {
        /// The next input offset the task had not processed when it wrote its state.
        public var processedMark: Int64
        /// Every window with end + retention at or before this had been evicted.
        public var evictedBefore: Int64
        /// The changelog offset from which this task's line of owners wrote the partition (see
        /// `Checkpoint.changelogSince`): a task record naming another was written by another
        /// run of the group (the other mode, or a recount after an offset reset).
        public var lineage: Int64 = 0
        /// Which input the task counts, in windows of which size (`ChangelogRecord.source`): an
        /// owner without a commit continues the state only of a task of the same input and size.
        public var source: UInt64 = 0
        /// The task's event-time watermark when it wrote its state (nil: none yet), from which a
        /// new owner's event time goes on while its input stays quiet.
        public var watermark: Int64?
        /// The group the task counts for (`--group`): a state topic holds one group's state.
        public var group: String = ""
    }

    /// A stable name of the input a task counts: the repartition topic's partitions (two
    /// stages, whatever the input topic) or the partitions of an input topic (one stage), and the
    /// size of the windows it counts them in (the windows of another size are other windows,
    /// even before a commit has recorded the size). FNV-1a, so that every process and build
    /// agrees.
    public static func source(crossesShuffle: Bool, inputTopic: String, windowSize: Int64) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in ((crossesShuffle ? "repartition" : "input " + inputTopic) + " window \(windowSize)").utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return hash
    }

    /// One record to write.
    public struct Entry: Sendable {
        public var key: [UInt8]
        /// nil: a tombstone.
        public var value: [UInt8]?
    }

    // MARK: Keys

    static func headKey(_ window: WindowKey) -> [UInt8] {
        var key: [UInt8] = [Tag.head.rawValue]
        appendWindow(window, to: &key)
        return key
    }

    static func chunkKey(_ window: WindowKey, set: UInt8, index: UInt16) -> [UInt8] {
        var key: [UInt8] = [Tag.chunk.rawValue]
        appendWindow(window, to: &key)
        key.append(set)
        key.append(UInt8(index >> 8))
        key.append(UInt8(index & 0xFF))
        return key
    }

    private static func appendWindow(_ window: WindowKey, to key: inout [UInt8]) {
        withUnsafeBytes(of: window.windowStart.bigEndian) { key.append(contentsOf: $0) }
        let id = Array(window.deliveryId.utf8.prefix(Int(UInt16.max)))
        key.append(UInt8(id.count >> 8))
        key.append(UInt8(id.count & 0xFF))
        key.append(contentsOf: id)
    }

    /// What a key names.
    public enum Key: Hashable, Sendable {
        case head(WindowKey)
        case chunk(WindowKey, set: UInt8, index: UInt16)
        case task
    }

    public static func decodeKey(_ bytes: some Collection<UInt8>) -> Key? {
        let key = Array(bytes)
        guard let first = key.first, let tag = Tag(rawValue: first) else { return nil }
        if tag == .task { return key.count == 1 ? .task : nil }
        guard key.count >= 11 else { return nil }
        var start: Int64 = 0
        for index in 1...8 { start = start << 8 | Int64(key[index]) }
        let length = Int(key[9]) << 8 | Int(key[10])
        guard key.count >= 11 + length else { return nil }
        let window = WindowKey(windowStart: start, deliveryId: String(decoding: key[11..<(11 + length)], as: UTF8.self))
        switch tag {
        case .head:
            return key.count == 11 + length ? .head(window) : nil
        case .chunk:
            guard key.count == 11 + length + 3 else { return nil }
            let rest = 11 + length
            return .chunk(window, set: key[rest], index: UInt16(key[rest + 1]) << 8 | UInt16(key[rest + 2]))
        case .task:
            return nil
        }
    }

    // MARK: Values

    /// The records for one window's state. `previousSet` is the chunk set the changelog's
    /// head points at now (nil: none); a window that needs chunks writes the other set, then
    /// the head. Returns the records and the set the head now names (nil: inline).
    static func entries(for state: WindowState, previousSet: UInt8?) -> (entries: [Entry], set: UInt8?, chunks: UInt16) {
        let window = state.key
        var broadlogs: [UInt8] = []
        broadlogs.reserveCapacity(state.broadlogs.count * 12)
        var chunkStarts: [Int] = [0]
        for entry in state.broadlogs {
            // In place: an array per id was an allocation per broadlog of every window written.
            var id = entry.id
            id.withUTF8 { utf8 in
                let id = UnsafeBufferPointer(rebasing: utf8.prefix(Int(UInt16.max)))
                if broadlogs.count - chunkStarts.last! + id.count + 3 > chunkBytes { chunkStarts.append(broadlogs.count) }
                append(UInt16(id.count), to: &broadlogs)
                broadlogs.append(contentsOf: id)
                broadlogs.append(entry.actions)
            }
        }
        var head: [UInt8] = [version, Tag.head.rawValue]
        append(state.countedThrough, to: &head)
        append(state.emittedRevision, to: &head)
        for counter in state.counters { append(counter, to: &head) }
        if broadlogs.count <= chunkBytes {
            head.append(0)
            head.append(contentsOf: broadlogs)
            return ([Entry(key: headKey(window), value: head)], nil, 0)
        }
        let set: UInt8 = previousSet == 0 ? 1 : 0
        var entries: [Entry] = []
        for (index, start) in chunkStarts.enumerated() {
            let end = index + 1 < chunkStarts.count ? chunkStarts[index + 1] : broadlogs.count
            entries.append(
                Entry(key: chunkKey(window, set: set, index: UInt16(index)), value: [version, Tag.chunk.rawValue] + broadlogs[start..<end]))
        }
        head.append(1)
        head.append(set)
        append(UInt16(chunkStarts.count), to: &head)
        entries.append(Entry(key: headKey(window), value: head))
        return (entries, set, UInt16(chunkStarts.count))
    }

    /// A window's head as read back.
    public struct Head: Sendable {
        public var countedThrough: Int64
        public var emittedRevision: UInt32
        public var counters: [UInt32]
        /// The broadlogs, when the head carries them.
        public var broadlogs: [WindowState.BroadlogActions]?
        /// Where they are otherwise: the chunk set and how many chunks.
        public var chunks: (set: UInt8, count: UInt16)?
    }

    public struct DecodingError: Error, CustomStringConvertible {
        public var description: String
    }

    static func decodeHead(_ bytes: [UInt8]) throws(DecodingError) -> Head {
        try read(bytes, tag: .head) { reader throws(DecodingError) in
            let counted = try reader.integer(Int64.self)
            let emitted = try reader.integer(UInt32.self)
            var counters: [UInt32] = []
            for _ in WindowState.counterNames { counters.append(try reader.integer(UInt32.self)) }
            switch try reader.byte() {
            case 0:
                return Head(countedThrough: counted, emittedRevision: emitted, counters: counters, broadlogs: try decodeBroadlogs(&reader))
            case 1:
                let set = try reader.byte()
                let count = try reader.integer(UInt16.self)
                guard reader.isAtEnd else { throw DecodingError(description: "changelog head with trailing bytes") }
                return Head(countedThrough: counted, emittedRevision: emitted, counters: counters, chunks: (set, count))
            case let other:
                throw DecodingError(description: "changelog head with unknown storage \(other)")
            }
        }
    }

    static func decodeChunk(_ bytes: [UInt8]) throws(DecodingError) -> [WindowState.BroadlogActions] {
        try read(bytes, tag: .chunk) { reader throws(DecodingError) in try decodeBroadlogs(&reader) }
    }

    private static func decodeBroadlogs(_ reader: inout ByteReader<DecodingError>) throws(DecodingError) -> [WindowState.BroadlogActions] {
        var broadlogs: [WindowState.BroadlogActions] = []
        while !reader.isAtEnd {
            let length = Int(try reader.integer(UInt16.self))
            let id = try reader.slice(length)
            broadlogs.append(WindowState.BroadlogActions(id: String(decoding: id, as: UTF8.self), actions: try reader.byte()))
        }
        return broadlogs
    }

    static func taskValue(_ state: TaskState) -> [UInt8] {
        var value: [UInt8] = [version, Tag.task.rawValue]
        append(state.processedMark, to: &value)
        append(state.evictedBefore, to: &value)
        append(state.lineage, to: &value)
        append(state.source, to: &value)
        append(state.watermark ?? .min, to: &value)
        let group = Array(state.group.utf8.prefix(Int(UInt16.max)))
        append(UInt16(group.count), to: &value)
        value += group
        return value
    }

    static func decodeTask(_ bytes: [UInt8]) throws(DecodingError) -> TaskState {
        try read(bytes, tag: .task) { reader throws(DecodingError) in
            var state = TaskState(
                processedMark: try reader.integer(Int64.self), evictedBefore: try reader.integer(Int64.self),
                lineage: try reader.integer(Int64.self), source: try reader.integer(UInt64.self))
            let watermark = try reader.integer(Int64.self)
            state.watermark = watermark == .min ? nil : watermark
            state.group = String(decoding: try reader.slice(Int(try reader.integer(UInt16.self))), as: UTF8.self)
            guard reader.isAtEnd else { throw DecodingError(description: "changelog task record with trailing bytes") }
            return state
        }
    }

    // MARK: Bytes

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }


    /// Reads a value of `bytes`, after its version and the tag its key implies.
    private static func read<T>(
        _ bytes: [UInt8], tag: Tag, _ body: (inout ByteReader<DecodingError>) throws(DecodingError) -> T
    ) throws(DecodingError) -> T {
        let result: Result<T, DecodingError> = bytes.withUnsafeBytes { raw in
            var reader = ByteReader(raw, cutShort: DecodingError(description: "changelog record cut short"))
            do throws(DecodingError) {
                let found = try reader.byte()
                guard found == version else {
                    throw DecodingError(description: "changelog record of format version \(found); this trackpipe reads version \(version)")
                }
                guard try reader.byte() == tag.rawValue else { throw DecodingError(description: "changelog record of another kind than its key says") }
                return .success(try body(&reader))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}

