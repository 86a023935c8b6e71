import TrackingDomain
import Windowing

/// The format of a window task's changelog: one compacted topic partition per task, holding the
/// state of every window the task retains, so that a new owner reads the state back instead of
/// re-reading the input for `--retention`.
///
/// A window's state is a **head** and numbered **segments**. Each write of a window adds what
/// changed since its previous write: segments with the broadlogs that are new or showed a new
/// action (with all their actions), then the head, which carries the counters and names the
/// numbers of the segments that hold the window (a contiguous range). A number a head has named
/// is never written again: compaction keeps every segment's one record, and the latest head.
/// Reading back, a window is its latest head's counters and the union of the broadlogs of the
/// segments it names. From time to time the task folds a window's segments into fresh ones (a
/// merge, `TaskChangelog`), and deletes the old ones after the head that names the new ones.
///
/// Keys say what a record is; compaction keeps the latest value per key, and a deleted key gets a
/// tombstone (a null value):
/// - `W` window start (Int64, big-endian) delivery id (UInt16 length, bytes): a window's head;
/// - `S` window start, delivery id, segment number (UInt32, big-endian): broadlogs of a window;
/// - `w` and `s`: the same, with the window's size (Int64 milliseconds, big-endian) before its
///   start, written by a pipeline of several sizes (a one-size pipeline writes `W` and `S`, so
///   its state topics read back as they were written before sizes could be several);
/// - `T`: the task's own state as of the write: how far it had processed its input, the
///   eviction horizon, its watermark, where its line of owners began writing the partition, and
///   the group it counts for (so that a run of another group is refused before it writes here).
///
/// Values start with a format version byte, `version`, the one version this trackpipe writes
/// and reads: a record of any other is refused, not guessed at (a restore skips it as
/// unreadable). A release that changes the format reads the previous one for one release, then
/// drops it (docs/scale-out.md, "Formats").
public enum ChangelogRecord {
    public static let version: UInt8 = 2
    /// Broadlog bytes a segment carries at most: brokers refuse records over 1 MB by default.
    public static let segmentBytes = 512 * 1024

    package enum Tag: UInt8 {
        case head = 0x57  // W
        case segment = 0x53  // S
        case task = 0x54  // T
        case sizedHead = 0x77  // w
        case sizedSegment = 0x73  // s
    }

    /// The size a key of a one-size pipeline names (`W`, `S`): none; its task knows its one
    /// size. Every other size is written in the key (`w`, `s`).
    public static let unsized: Int64 = 0

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

        package init(
            processedMark: Int64, evictedBefore: Int64, lineage: Int64 = 0, source: UInt64 = 0, watermark: Int64? = nil, group: String = ""
        ) {
            (self.processedMark, self.evictedBefore, self.lineage) = (processedMark, evictedBefore, lineage)
            (self.source, self.watermark, self.group) = (source, watermark, group)
        }
    }

    /// A stable name of the input a task counts: the repartition topic's partitions (two
    /// stages, whatever the input topic) or the partitions of an input topic (one stage), and the
    /// sizes of the windows it counts them in (the windows of another size are other windows,
    /// even before a commit has recorded the sizes). FNV-1a, so that every process and build
    /// agrees; one size names it as it did before sizes could be several.
    public static func source(crossesShuffle: Bool, inputTopic: String, windowSizes: [Int64]) -> UInt64 {
        let sizes = windowSizes.map(String.init).joined(separator: ",")
        return DeliveryHash.fnv1a(((crossesShuffle ? "repartition" : "input " + inputTopic) + " window \(sizes)").utf8)
    }

    /// A window's head: its counters and marks, and which segments hold its broadlogs.
    public struct Head: Sendable, Equatable {
        public var counters: WindowCounters
        public var countedThrough: Int64
        public var emittedRevision: UInt32
        /// The numbers of the segments that hold the window's broadlogs (empty: none yet).
        public var segments: Range<UInt32>
        /// How many distinct broadlogs they hold (a broadlog that showed another action later is
        /// in more than one): what the window read back is sized for.
        public var broadlogCount: Int

        public init(counters: WindowCounters, countedThrough: Int64, emittedRevision: UInt32, segments: Range<UInt32>, broadlogCount: Int) {
            self.counters = counters
            self.countedThrough = countedThrough
            self.emittedRevision = emittedRevision
            self.segments = segments
            self.broadlogCount = broadlogCount
        }
    }

    /// What a key names.
    public enum Key: Hashable, Sendable {
        case head(WindowKey)
        case segment(WindowKey, number: UInt32)
        case task
    }

    /// One record of a changelog, as written and as read back.
    public enum Entry: Sendable, Equatable {
        case head(WindowKey, Head)
        /// A segment's broadlogs: a slice of a window's list, so that cutting a large window into
        /// segments copies nothing.
        case segment(WindowKey, number: UInt32, broadlogs: ArraySlice<BroadlogActions>)
        case task(TaskState)
        /// The record of this key is deleted.
        case tombstone(Key)

        /// The record's key and value (nil: a tombstone).
        public var encoded: (key: [UInt8], value: [UInt8]?) {
            var bytes: [UInt8] = []
            let (key, value) = encode(into: &bytes)
            return (Array(bytes[key]), value.map { Array(bytes[$0]) })
        }

        /// Appends the record's key, then its value, to `bytes`, and says where each lies (nil:
        /// a tombstone): a stage encodes every record of a commit into one buffer it keeps, where
        /// an array for each key and value cost two allocations and two frees a record, and a key
        /// grown byte by byte about 800 instructions (callgrind).
        public func encode(into bytes: inout [UInt8]) -> (key: Range<Int>, value: Range<Int>?) {
            let start = bytes.count
            switch self {
            case .head(let window, _): appendKey(.head(window), to: &bytes)
            case .segment(let window, let number, _): appendKey(.segment(window, number: number), to: &bytes)
            case .task: appendKey(.task, to: &bytes)
            case .tombstone(let key): appendKey(key, to: &bytes)
            }
            let keyEnd = bytes.count
            switch self {
            case .head(_, let head): appendHead(head, to: &bytes)
            case .segment(_, _, let broadlogs): appendSegment(broadlogs, to: &bytes)
            case .task(let state): bytes += encodeTask(state)
            case .tombstone: return (start..<keyEnd, nil)
            }
            return (start..<keyEnd, keyEnd..<bytes.count)
        }
    }

    // MARK: Keys

    public static func encodeKey(_ key: Key) -> [UInt8] {
        var bytes: [UInt8] = []
        appendKey(key, to: &bytes)
        return bytes
    }

    static func appendKey(_ key: Key, to bytes: inout [UInt8]) {
        switch key {
        case .task: bytes.append(Tag.task.rawValue)
        case .head(let window): appendWindowKey(window, tag: window.size == unsized ? .head : .sizedHead, number: nil, to: &bytes)
        case .segment(let window, let number):
            appendWindowKey(window, tag: window.size == unsized ? .segment : .sizedSegment, number: number, to: &bytes)
        }
    }

    /// The bytes of a window's key (without its tag).
    package static func windowKeyBytes(_ window: WindowKey) -> Int {
        (window.size == unsized ? 0 : 8) + 8 + 2 + min(window.deliveryId.utf8Count, Int(UInt16.max))
    }

    /// A window's key: its tag, size (unless unsized), start, delivery id (its length first), and
    /// a segment's number.
    private static func appendWindowKey(_ window: WindowKey, tag: Tag, number: UInt32?, to bytes: inout [UInt8]) {
        append(upTo: 1 + windowKeyBytes(window) + 4, to: &bytes) { raw in
            raw.storeBytes(of: tag.rawValue, as: UInt8.self)
            var at = 1
            if window.size != unsized {
                raw.storeBytes(of: window.size.bigEndian, toByteOffset: at, as: Int64.self)
                at += 8
            }
            raw.storeBytes(of: window.windowStart.bigEndian, toByteOffset: at, as: Int64.self)
            at += 8
            window.deliveryId.withUTF8 { utf8 in
                let count = min(utf8.count, Int(UInt16.max))
                raw.storeBytes(of: UInt16(count).bigEndian, toByteOffset: at, as: UInt16.self)
                if let base = utf8.baseAddress { (raw + at + 2).copyMemory(from: base, byteCount: count) }
                at += 2 + count
            }
            if let number {
                raw.storeBytes(of: number.bigEndian, toByteOffset: at, as: UInt32.self)
                at += 4
            }
            return at
        }
    }

    public static func decodeKey(_ bytes: some Collection<UInt8>) -> Key? {
        let key = Array(bytes)
        guard let first = key.first, let tag = Tag(rawValue: first) else { return nil }
        if tag == .task { return key.count == 1 ? .task : nil }
        let sized = tag == .sizedHead || tag == .sizedSegment
        let at = sized ? 9 : 1
        guard key.count >= at + 10 else { return nil }
        func int64(at offset: Int) -> Int64 { key[offset..<(offset + 8)].reduce(Int64(0)) { $0 << 8 | Int64($1) } }
        let size = sized ? int64(at: 1) : unsized
        let start = int64(at: at)
        let length = Int(key[at + 8]) << 8 | Int(key[at + 9])
        let rest = at + 10 + length
        guard key.count >= rest, !sized || size > 0 else { return nil }
        let window = key[(at + 10)..<rest].withUnsafeBytes { WindowKey(size: size, windowStart: start, deliveryId: DeliveryID($0)) }
        switch tag {
        case .head, .sizedHead:
            return key.count == rest ? .head(window) : nil
        case .segment, .sizedSegment:
            guard key.count == rest + 4 else { return nil }
            let number = key[rest..<(rest + 4)].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            return .segment(window, number: number)
        case .task:
            return nil
        }
    }

    // MARK: Values

    /// The bytes a broadlog takes in a segment: one byte with its actions and the length of its
    /// id (below 31), the length again as a varint for a longer id, then the id.
    package static func encodedSize(of broadlog: BroadlogActions) -> Int { encodedSize(idBytes: broadlog.id.utf8Count) }

    /// The same, of a broadlog whose id takes `idBytes`: what a loop over a window's broadlogs
    /// reads in place (`broadlogs[index].id.utf8Count`), where taking each broadlog as a value
    /// copied it (about 100 instructions a broadlog; callgrind).
    package static func encodedSize(idBytes: Int) -> Int {
        let length = min(idBytes, Int(UInt16.max))
        return length < 31 ? 1 + length : 1 + Varint.size(of: UInt64(length)) + length
    }

    /// Written in place, its size counted first: appended broadlog by broadlog, an array grew and
    /// checked its room per byte (about 170 instructions a broadlog, 40 here; callgrind).
    static func appendSegment(_ broadlogs: ArraySlice<BroadlogActions>, to bytes: inout [UInt8]) {
        var size = 2
        for index in broadlogs.indices { size += encodedSize(idBytes: broadlogs[index].id.utf8Count) }
        append(upTo: size, to: &bytes) { raw in
            raw.storeBytes(of: version, as: UInt8.self)
            raw.storeBytes(of: Tag.segment.rawValue, toByteOffset: 1, as: UInt8.self)
            var at = 2
            for index in broadlogs.indices {
                let actions = broadlogs[index].actions & 0x7
                broadlogs[index].id.withUTF8 { utf8 in
                    // As `encodedSize(idBytes:)` counts it: the id cut at UInt16.max bytes.
                    let length = min(utf8.count, Int(UInt16.max))
                    if length < 31 {
                        raw.storeBytes(of: UInt8(length) << 3 | actions, toByteOffset: at, as: UInt8.self)
                        at += 1
                    } else {
                        raw.storeBytes(of: 31 << 3 | actions, toByteOffset: at, as: UInt8.self)
                        at = Varint.write(UInt64(length), to: raw, at: at + 1)
                    }
                    if let base = utf8.baseAddress { (raw + at).copyMemory(from: base, byteCount: length) }
                    at += length
                }
            }
            return at
        }
    }

    package static func decodeSegment(_ bytes: [UInt8]) throws(DecodingError) -> [BroadlogActions] {
        try read(bytes, tag: .segment) { reader throws(DecodingError) in
            var broadlogs: [BroadlogActions] = []
            while !reader.isAtEnd {
                let first = try reader.byte()
                var length = Int(first >> 3)
                if length == 31 { length = Int(try reader.varint()) }
                let actions = first & 0x7
                guard actions != 0 else { throw DecodingError(description: "changelog segment with a broadlog without actions") }
                let id = try reader.slice(length)
                broadlogs.append(BroadlogActions(id: BroadlogID(id), actions: actions))
            }
            return broadlogs
        }
    }

    /// The most bytes a head's value takes: its version and tag, and 18 varints.
    private static let headCapacity = 2 + 18 * Varint.maxBytes

    /// The counters are read field by field, in the order of `WindowCounters.all` (the order
    /// `decodeHead` reads them in): a key path per counter cost about 400 instructions
    /// (`swift_getAtKeyPath`), two thirds of a head's encoding (callgrind).
    static func appendHead(_ head: Head, to bytes: inout [UInt8]) {
        append(upTo: headCapacity, to: &bytes) { raw in
            raw.storeBytes(of: version, as: UInt8.self)
            raw.storeBytes(of: Tag.head.rawValue, toByteOffset: 1, as: UInt8.self)
            var at = 2
            func put(_ value: UInt64) { at = Varint.write(value, to: raw, at: at) }
            put(Varint.zigzag(head.countedThrough))
            put(UInt64(head.emittedRevision))
            let counters = head.counters
            put(UInt64(counters.impressions)); put(UInt64(counters.clicks)); put(UInt64(counters.opens))
            put(UInt64(counters.uniqueImpressions)); put(UInt64(counters.uniqueClicks)); put(UInt64(counters.uniqueOpens))
            put(UInt64(counters.dismissals)); put(UInt64(counters.push)); put(UInt64(counters.local))
            put(UInt64(counters.unknownChannel)); put(UInt64(counters.ios)); put(UInt64(counters.android))
            put(UInt64(counters.unknownPlatform))
            put(UInt64(head.segments.lowerBound))
            put(UInt64(head.segments.count))
            put(UInt64(head.broadlogCount))
            return at
        }
    }

    package static func decodeHead(_ bytes: [UInt8]) throws(DecodingError) -> Head {
        try read(bytes, tag: .head) { reader throws(DecodingError) in
            let counted = try reader.zigzag()
            let emitted: UInt32 = try narrow(try reader.varint(), "emitted revision")
            var counters = WindowCounters()
            for counter in WindowCounters.all { counters[keyPath: counter.keyPath] = try narrow(try reader.varint(), counter.name) }
            let first: UInt32 = try narrow(try reader.varint(), "first segment")
            let count: UInt32 = try narrow(try reader.varint(), "segment count")
            let broadlogs: UInt32 = try narrow(try reader.varint(), "broadlog count")
            guard first <= UInt32.max - count, reader.isAtEnd else { throw DecodingError(description: "changelog head with trailing bytes") }
            return Head(
                counters: counters, countedThrough: counted, emittedRevision: emitted, segments: first..<(first + count),
                broadlogCount: Int(broadlogs))
        }
    }

    static func encodeTask(_ state: TaskState) -> [UInt8] {
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

    package static func decodeTask(_ bytes: [UInt8]) throws(DecodingError) -> TaskState {
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

    public struct DecodingError: Error, CustomStringConvertible {
        public var description: String
    }

    // MARK: Bytes

    /// Appends at most `count` bytes to `bytes`: `write` writes them from the address it is
    /// given and returns how many it wrote. Written in a temporary buffer (on the stack, for a
    /// key, a head or a small segment) and appended in one copy.
    private static func append(upTo count: Int, to bytes: inout [UInt8], _ write: (UnsafeMutableRawPointer) -> Int) {
        withUnsafeTemporaryAllocation(byteCount: max(count, 1), alignment: 1) { room in
            // Safe: an allocation of at least one byte has an address.
            let written = write(room.baseAddress!)
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: room[0..<written]))
        }
    }

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    private static func narrow<T: FixedWidthInteger>(_ value: UInt64, _ what: String) throws(DecodingError) -> T {
        guard let narrowed = T(exactly: value) else { throw DecodingError(description: "changelog head with \(what) out of range") }
        return narrowed
    }

    /// Checks a value's first two bytes, its version and the tag its key implies, without
    /// reading the rest: a restore keeps segments undecoded until a head names them, yet refuses
    /// one of another version or kind when it is read.
    package static func checkHeader(_ bytes: [UInt8], tag: Tag) throws(DecodingError) {
        guard bytes.count >= 2 else { throw DecodingError(description: "changelog record cut short") }
        guard bytes[0] == version else {
            throw DecodingError(description: "changelog record of format version \(bytes[0]); this trackpipe reads version \(version)")
        }
        guard bytes[1] == tag.rawValue else { throw DecodingError(description: "changelog record of another kind than its key says") }
    }

    /// Reads a value of `bytes`, after its version and the tag its key implies.
    private static func read<T>(
        _ bytes: [UInt8], tag: Tag, _ body: (inout ByteReader<DecodingError>) throws(DecodingError) -> T
    ) throws(DecodingError) -> T {
        try checkHeader(bytes, tag: tag)
        let result: Result<T, DecodingError> = bytes.withUnsafeBytes { raw in
            var reader = ByteReader(UnsafeRawBufferPointer(rebasing: raw[2...]), cutShort: DecodingError(description: "changelog record cut short"))
            do throws(DecodingError) {
                return .success(try body(&reader))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }
}
